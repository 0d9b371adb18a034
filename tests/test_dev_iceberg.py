"""`floe dev` runs the compactor in-process on a timer (issue 17): a topic with
``floe.iceberg.enable=true`` produced to by confluent-kafka with JSON values
becomes an Iceberg table in the SQLite metastore's SQL catalog, and a Kafka
consumer, pyiceberg and DuckDB read the same rows. ``--no-compactor`` leaves the
data in segments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from metastore.pgserver import free_port
from tests.compactor.agent_helpers import consume_all, produce
from tests.compactor.test_agent_e2e import create_topic

pytest.importorskip("pyiceberg")
pytestmark = pytest.mark.interop
ROOT = Path(__file__).resolve().parents[1]


class Dev:
    def __init__(self, data: Path, *extra: str) -> None:
        self.data = data
        self.port = free_port()
        self.log = (data.parent / "dev.log").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "floe_cli.main", "dev", "--data-dir", str(data),
                "--port", str(self.port), "--admin-port", str(free_port()), "--workers", "1",
                "--cluster-id", "floe-test", *extra,
            ],
            cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        self.bootstrap = f"127.0.0.1:{self.port}"
        self._wait_listening()

    def _wait_listening(self) -> None:
        import socket

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.data.parent / "dev.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("floe dev did not listen")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[Dev]:
    d = Dev(tmp_path / "floe-data", "--compactor-interval-ms", "200")
    yield d
    d.stop()


def load_table(data: Path, name: str) -> Any:
    from compactor.iceberg import open_catalog

    cat = open_catalog("", f"sqlite:///{data / 'meta.db'}", f"file://{data / 'objects'}")
    return cat.load_table(("floe", name))


def wait_table_rows(data: Path, name: str, n: int, timeout: float = 90) -> Any:
    """The table once it holds ``n`` rows (the dev compactor commits on its timer)."""
    from pyiceberg.exceptions import NoSuchTableError

    deadline = time.monotonic() + timeout
    while True:
        try:
            t = load_table(data, name)
            if t.current_snapshot() is not None:
                arrow = t.scan().to_arrow()
                if arrow.num_rows >= n:
                    return t, arrow
        except (NoSuchTableError, OSError):
            pass
        assert time.monotonic() < deadline, f"no table with {n} rows after {timeout}s"
        time.sleep(0.3)


def json_rows(n: int, partitions: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return [
        (i % partitions, f"user-{i % 5}".encode(),
         json.dumps({"id": i, "item": f"sku-{i % 13}", "qty": i % 4 + 1, "price": i * 0.25}).encode())
        for i in range(n)
    ]  # fmt: skip


def test_dev_compactor_makes_iceberg_table(dev: Dev) -> None:
    create_topic(
        dev.bootstrap, "orders", 2, **{"floe.iceberg.enable": "true", "floe.value.format": "json"}
    )
    rows = json_rows(300, 2)
    for c in range(0, len(rows), 50):
        produce(dev.bootstrap, "orders", rows[c : c + 50], **{"compression.type": "zstd"})
    table, arrow = wait_table_rows(dev.data, "orders", 300)
    kafka = sorted(consume_all(dev.bootstrap, "orders", 2, 300))
    assert len(kafka) == 300
    ice = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in arrow.to_pylist())
    assert ice == kafka
    by_offset = {(r["partition"], r["offset"]): r["value_json"] for r in arrow.to_pylist()}
    for p, o, _k, v in kafka:
        assert by_offset[(p, o)] == json.loads(v)
    duckdb = pytest.importorskip("duckdb")
    paths = [f.file.file_path for f in table.scan().plan_files()]
    got = duckdb.sql(
        f'select partition, "offset", key, value, value_json.qty from read_parquet({paths!r})'
    ).fetchall()
    assert sorted((p, o, bytes(k), bytes(v)) for p, o, k, v, _q in got) == kafka
    assert sum(q for *_x, q in got) == sum(json.loads(v)["qty"] for *_y, v in kafka)


def test_dev_no_compactor(tmp_path: Path) -> None:
    d = Dev(tmp_path / "floe-data", "--no-compactor")
    try:
        create_topic(d.bootstrap, "plain", 1, **{"floe.iceberg.enable": "true"})
        produce(d.bootstrap, "plain", [(0, b"k", b"{}")])
        assert len(consume_all(d.bootstrap, "plain", 1, 1)) == 1
        assert not list((tmp_path / "floe-data" / "objects").glob("parquet*"))
        assert not (tmp_path / "floe-data" / "objects" / "iceberg").exists()
    finally:
        d.stop()


@pytest.mark.slow
def test_four_ways_identical_rows(dev: Dev, spark: Any) -> None:
    """Kafka consumer, spark.read.format("floe"), Spark through the Iceberg catalog
    (SparkCatalog over the JDBC catalog in the SQLite metastore) and pyiceberg/DuckDB:
    the same rows (counts, offsets, fields); Spark's ``VERSION AS OF`` an earlier
    snapshot returns that snapshot's rows. Iceberg publishes no Spark runtime for the
    project's PySpark 4.3, so the catalog read runs Spark 4.1 in a process of its own
    (tests.fixtures.iceberg_spark)."""
    from tests.fixtures.iceberg_spark import run_iceberg_sql, unb64

    create_topic(
        dev.bootstrap, "four", 2, **{"floe.iceberg.enable": "true", "floe.value.format": "json"}
    )
    rows = json_rows(400, 2)
    for c in range(0, 200, 100):
        produce(dev.bootstrap, "four", rows[c : c + 100], **{"compression.type": "lz4"})
    first, first_arrow = wait_table_rows(dev.data, "four", 200)
    first_snapshot = first.current_snapshot().snapshot_id
    first_rows = sorted((r["partition"], r["offset"]) for r in first_arrow.to_pylist())
    assert len(first_rows) == 200
    for c in range(200, 400, 100):
        produce(dev.bootstrap, "four", rows[c : c + 100], **{"compression.type": "lz4"})
    table, arrow = wait_table_rows(dev.data, "four", 400)
    kafka = sorted(consume_all(dev.bootstrap, "four", 2, 400))
    ice = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in arrow.to_pylist())
    meta_url, objects_url = f"sqlite:///{dev.data / 'meta.db'}", f"file://{dev.data / 'objects'}"
    df = (
        spark.read.format("floe")
        .option("metastore", meta_url)
        .option("objects", objects_url)
        .option("subscribe", "four")
        .load()
    )
    floe = sorted(
        (r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in df.collect()
    )
    got = run_iceberg_sql(
        meta_url,
        objects_url,
        {
            "rows": "select partition, offset, key, value, value_json.id as id, "
            "value_json.qty as qty from floe.floe.four",
            "as_of": f"select partition, offset from floe.floe.four "
            f"VERSION AS OF {first_snapshot}",
            "snapshots": "select snapshot_id from floe.floe.four.snapshots",
        },
    )
    spark_ice = sorted(
        (r["partition"], r["offset"], unb64(r["key"]), unb64(r["value"])) for r in got["rows"]
    )
    paths = [f.file.file_path for f in table.scan().plan_files()]
    duckdb = pytest.importorskip("duckdb")
    duck = sorted(
        (p, o, bytes(k), bytes(v))
        for p, o, k, v in duckdb.sql(
            f'select partition, "offset", key, value from read_parquet({paths!r})'
        ).fetchall()
    )
    assert len(kafka) == 400
    assert kafka == floe == spark_ice == ice == duck
    assert sorted((r["id"], r["qty"]) for r in got["rows"]) == sorted(
        (json.loads(v)["id"], json.loads(v)["qty"]) for *_x, v in kafka
    )
    # Time travel: Spark AS OF the first snapshot sees its 200 rows, not the later ones.
    assert sorted((r["partition"], r["offset"]) for r in got["as_of"]) == first_rows
    assert first_snapshot in {r["snapshot_id"] for r in got["snapshots"]}
    assert table.current_snapshot().snapshot_id in {r["snapshot_id"] for r in got["snapshots"]}
