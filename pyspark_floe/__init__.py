"""PySpark auto-registration of the ``floe`` data source.

PySpark (>= 4.0) looks for top-level modules named ``pyspark_*`` that expose a
``DefaultSource`` data source class and registers it under its ``name()``, so
with this package importable ``spark.read.format("floe")`` works without
``spark.dataSource.register(...)``.
"""

from spark_source.source import FloeDataSource as DefaultSource

__all__ = ["DefaultSource"]
