# Floe developer commands. `make test` is the README's test command and the one CI runs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.floe-installed

.PHONY: install deps kafka conformance dev test lint codegen codegen-check bench clean infra

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

## System tools the tests use (PostgreSQL, kcat, a JDK, Maven): installs what is missing.
deps:
	@bash scripts/deps.sh

install: $(STAMP)

## Run Floe on embedded defaults (SQLite metastore, ./data/objects, port 9092).
dev: $(STAMP)
	$(BIN)/floe dev

## The whole test suite (unit, contract, integration with real Postgres and moto S3, interop),
## in TEST_WORKERS pytest processes (pytest-xdist; each starts its own Postgres and moto).
TEST_WORKERS ?= 2
test: deps $(STAMP) $(VENV)/checkov/bin/checkov
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check kafka_protocol/codegen
	$(BIN)/mypy kafka_protocol objectstore metastore agent compactor spark_source pyspark_floe floe_cli loadtest

## Regenerate the Kafka message modules from the JSON specs.
codegen: $(STAMP)
	$(BIN)/python -m kafka_protocol.codegen

## Fail if the checked-in generated modules differ from a fresh generation.
codegen-check: $(STAMP)
	$(BIN)/python -m kafka_protocol.codegen --check

## Deploy artifacts: terraform fmt/validate/test (offline), checkov, Dockerfile/static checks, agent booted with the module's env.
infra: $(STAMP) $(VENV)/checkov/bin/checkov
	$(BIN)/python -m pytest -q tests/infra

$(VENV)/checkov/bin/checkov:
	$(PY) -m venv $(VENV)/checkov
	$(VENV)/checkov/bin/pip install -q checkov

## OMB-style benchmark against floe dev (see loadtest/RESULTS.md); bench-codec for the codec micro-benchmark.
bench: $(STAMP)
	$(BIN)/python -m loadtest run loadtest/workloads/1-topic-16-partitions-1kb-2p-2c-8k.yaml --backend dev

bench-codec: $(STAMP)
	$(BIN)/python -m loadtest.codec

## Fetch the Apache Kafka broker jars (Maven Central) used beside Floe in benchmarks and conformance tests.
kafka: $(STAMP)
	$(BIN)/python -m loadtest.kafka_broker fetch

## The differential suite: every scenario against a real Apache Kafka 4.1 broker and Floe (also part of `make test`).
conformance: deps $(STAMP)
	$(BIN)/python -m pytest -q tests/conformance

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
