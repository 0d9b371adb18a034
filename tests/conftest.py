"""Shared pytest configuration: service fixtures live in tests/fixtures/ as plugins."""

pytest_plugins = ["tests.fixtures.tools", "tests.fixtures.postgres", "tests.fixtures.s3", "tests.fixtures.agent", "tests.fixtures.agent_process", "tests.fixtures.spark", "tests.fixtures.kafka_broker"]
