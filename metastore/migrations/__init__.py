"""Alembic migrations of the metastore schema (run with ``metastore.migrate``)."""
