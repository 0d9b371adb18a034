"""Spark reading Floe's Iceberg tables through the Iceberg catalog, in a process of its own.

``run_iceberg_sql(metastore_url, objects_url, {"name": "select ..."})`` runs the
queries in a Spark of its own process (:mod:`loadtest.spark_iceberg_job`) whose
``floe`` catalog is Iceberg's ``SparkCatalog`` over the JDBC catalog in the
metastore's database (:func:`compactor.iceberg_spark.spark_catalog_conf`), with
the runtime and JDBC driver jars from Maven Central (resolved with ``mvn`` once,
cached under ``~/.m2/floe-interop/<key>`` like the tests' ``maven_classpath``).
Used by the four-way read test (tests/test_dev_iceberg.py) and the Iceberg
benchmark (:mod:`loadtest.iceberg`).

Which Spark: the project's PySpark when Iceberg publishes a runtime for its line;
otherwise (PySpark 4.2+, see :mod:`compactor.iceberg_spark`) the newest PySpark
of the newest line that has one, installed once with pip into
``~/.cache/floe-interop/pyspark-<version>`` (outside git; ``FLOE_INTEROP_CACHE``
moves it) and put first on the job's ``PYTHONPATH``. A Spark process costs
15-30 s on this box, so callers ask all their queries in one call.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

from compactor.iceberg_spark import (
    newest_runtime_spark,
    runtime_for,
    spark_catalog_conf,
    spark_jars,
)
from loadtest.buildlock import exclusive
from loadtest.maven import MavenUnavailable
from loadtest.maven import maven_jars as _maven_jars

# The newest PySpark of the newest Spark line Iceberg has a runtime for.
SIDE_PYSPARK = {"4.1": "4.1.4"}
JOB = Path(__file__).with_name("spark_iceberg_job.py")
CACHE = Path(os.environ.get("FLOE_INTEROP_CACHE", Path.home() / ".cache" / "floe-interop"))

class SparkIcebergUnavailable(RuntimeError):
    """PySpark, Maven or Maven Central could not provide what the job needs."""


def maven_jars(coords: list[str]) -> list[str]:
    """Jars of ``group:artifact:version`` coordinates and their dependencies."""
    try:
        return _maven_jars(coords)
    except MavenUnavailable as e:
        raise SparkIcebergUnavailable(str(e)) from e


def side_pyspark() -> tuple[str, str | None]:
    """``(spark version, PYTHONPATH entry or None for the project's own PySpark)``."""
    own = version("pyspark")
    if runtime_for(own) is not None:
        return own, None
    want = SIDE_PYSPARK[newest_runtime_spark()]
    target = CACHE / f"pyspark-{want}"
    done = target / ".floe-complete"
    if done.exists():
        return want, str(target)
    with exclusive(CACHE / f"pyspark-{want}.lock"):
        if not done.exists():
            res = subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade",
                 "--target", str(target), f"pyspark=={want}"],
                capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            if res.returncode != 0:
                raise SparkIcebergUnavailable(
                    f"pip could not install pyspark=={want}:\n{res.stderr[-2000:]}"
                )
            done.write_text(want)
    return want, str(target)


def run_iceberg_sql(
    metastore_url: str, objects_url: str, queries: dict[str, str], timeout: float = 600
) -> dict[str, Any]:
    """``{name: rows}`` of each query (rows as dicts; bytes as ``{"b64": ...}``),
    plus ``spark_version`` and ``seconds`` (per query)."""
    spark_version, path = side_pyspark()
    job = {
        "jars": maven_jars(spark_jars(spark_version, metastore_url, objects_url)),
        "conf": spark_catalog_conf(metastore_url, objects_url),
        "queries": queries,
    }
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    if path is not None:
        env["PYTHONPATH"] = path
    env["PYSPARK_PYTHON"] = sys.executable
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(job, f)
        f.flush()
        res = subprocess.run(
            [sys.executable, str(JOB), f.name],
            capture_output=True, text=True, timeout=timeout, env=env,
        )  # fmt: skip
    for line in res.stdout.splitlines():
        if line.startswith("FLOE-RESULT "):
            out: dict[str, Any] = json.loads(line[len("FLOE-RESULT ") :])
            return out
    raise AssertionError(
        f"the Spark {spark_version} Iceberg job failed (exit {res.returncode}):\n"
        + res.stderr[-4000:]
    )


def unb64(v: Any) -> bytes | None:
    """The bytes of a job's ``{"b64": ...}`` value."""
    return None if v is None else base64.b64decode(v["b64"])
