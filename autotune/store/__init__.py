"""The Optuna study and everything stored beside it: URLs, SQLite, PostgreSQL, claims, recovery."""
