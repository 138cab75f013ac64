"""Readers of what trainers print or write: LTX-2 logs, the hook's file, the metrics file."""
