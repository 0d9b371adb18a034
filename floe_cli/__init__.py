"""Floe: floe_cli."""
