"""Operational scripts (the GPU check, the sweep benchmark); a package so tests and mypy can import them."""
