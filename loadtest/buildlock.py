"""One builder at a time for the caches the benchmarks and tests fill on first use.

Where it sits: under the helpers that resolve jars with Maven (:mod:`loadtest.maven`,
:func:`loadtest.kafka_broker.classpath`), compile the Java drivers
(:func:`loadtest.java_driver.compile_once`) or install a side
PySpark (:mod:`loadtest.spark_iceberg`). ``make test`` runs the suite in several
pytest processes (pytest-xdist), so two of them can reach an empty cache at the
same time: without a lock both would run Maven into the same local repository
and ``classpath.txt``, or javac into the same folder, and one could read the
other's half-written file. Each builder takes :func:`exclusive` on a lock file,
then looks at the cache again before building.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Every Maven resolution takes this one: they share ~/.m2/repository.
MAVEN_LOCK = Path.home() / ".m2" / "floe-interop.lock"


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_file`` (created, with its folder, if
    missing) for the ``with`` block; released when the block ends or the process dies."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
