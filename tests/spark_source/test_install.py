"""The data source registers under every install mode: PySpark finds top-level
``pyspark_*`` modules, so a wheel (and so a plain ``pip install .``) must carry
``pyspark_floe`` next to the packages it imports, migrations included. (Editable
installs use a plain .pth of the checkout; tests/fixtures/spark.py relies on it.)"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_carries_the_data_source(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    (wheel,) = tmp_path.glob("floe-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "pyspark_floe/__init__.py",
        "spark_source/source.py",
        "spark_source/agents.py",
        "objectstore/parquet_batches.py",
        "metastore/reads.py",
        "metastore/migrations/versions/0004_read_leases.py",
    ):
        assert needed in names, needed
    assert not any(n.startswith("tests/") for n in names)
