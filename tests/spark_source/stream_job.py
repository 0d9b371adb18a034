"""A streaming query (floe -> Parquet sink, availableNow) run as its own driver process,
for the kill -9 tests. ``python -m tests.spark_source.stream_job METASTORE OBJECTS OUT
CKPT [GATE]``: with GATE, the task that reads partition 0 offset 27 creates
``GATE.blocked`` and waits until GATE disappears (the test kills the driver meanwhile).
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    metastore, objects, out, ckpt = sys.argv[1:5]
    gate = sys.argv[5] if len(sys.argv) > 5 else ""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("floe-stream-kill")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def hold(value: bytes | None, partition: int, offset: int) -> bytes | None:
        import os
        import time

        if gate and partition == 0 and offset == 27 and os.path.exists(gate):
            with open(gate + ".blocked", "w"):
                pass
            while os.path.exists(gate):
                time.sleep(0.05)
        return value

    df = (
        spark.readStream.format("floe")
        .option("metastore", metastore)
        .option("objects", objects)
        .option("subscribe", "t")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "20")
        .option("leaseTimeout", "30s")
        .load()
    )
    q = (
        df.withColumn("value", F.udf(hold, BinaryType())("value", "partition", "offset"))
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    spark.stop()
    return 0 if q.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main())
