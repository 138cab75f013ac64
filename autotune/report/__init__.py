"""What a sweep tells its user: the report in markdown, HTML and JSON, and live status."""
