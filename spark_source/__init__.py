"""Floe: spark_source — a PySpark (>= 4.2) data source named ``floe``.

Batch and streaming reads of Floe topics with the options and columns of
Spark's Kafka source; the driver plans from the metastore, executors read
segments and Parquet straight from object storage. ``pyspark_floe`` exposes
it as ``DefaultSource`` so PySpark registers it automatically.

Modules: :mod:`~spark_source.options` (option parsing),
:mod:`~spark_source.offsets` (checkpoint JSON, admission control),
:mod:`~spark_source.plan` (read plans), :mod:`~spark_source.driver`
(metastore lookups), :mod:`~spark_source.reader` (executor reads and decoding),
:mod:`~spark_source.source` (the PySpark classes; imports pyspark),
:mod:`~spark_source.listener` (lag metrics).
"""
