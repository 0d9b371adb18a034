"""Floe: objectstore."""
