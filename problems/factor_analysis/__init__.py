"""Placeholder: filled in by the problem module."""
