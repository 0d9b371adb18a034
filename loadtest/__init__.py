"""Floe: loadtest."""
