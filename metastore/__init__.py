"""Floe: metastore."""
