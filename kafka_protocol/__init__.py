"""Floe: kafka_protocol."""
