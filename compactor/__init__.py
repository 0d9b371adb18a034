"""Floe: compactor."""
