"""Floe: agent."""
