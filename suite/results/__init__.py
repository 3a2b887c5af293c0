"""Stored formats: run records, draws files, the results table."""
