"""The sweep: setup, the search loop, local and shared scheduling, the conclusion."""
