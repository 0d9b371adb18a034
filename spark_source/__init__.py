"""Floe: spark_source."""
