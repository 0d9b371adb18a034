"""Spark's settings for Floe's Iceberg catalog (compactor.iceberg_spark): the JDBC
catalog over the metastore's database, the jars for a Spark version. The Spark
read itself is tests/test_dev_iceberg.py::test_four_ways_identical_rows."""

from __future__ import annotations

import pytest

from compactor.iceberg_spark import (
    jdbc_catalog_uri,
    newest_runtime_spark,
    runtime_for,
    spark_catalog_conf,
    spark_jars,
)


def test_sqlite_catalog_conf() -> None:
    conf = spark_catalog_conf("sqlite+aiosqlite:////data/meta.db", "file:///data/objects")
    assert conf["spark.sql.catalog.floe"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.floe.type"] == "jdbc"
    assert conf["spark.sql.catalog.floe.uri"] == "jdbc:sqlite:/data/meta.db"
    assert conf["spark.sql.catalog.floe.warehouse"] == "file:///data/objects/iceberg"
    assert "IcebergSparkSessionExtensions" in conf["spark.sql.extensions"]
    with pytest.raises(ValueError):
        jdbc_catalog_uri("sqlite:///:memory:")


def test_postgres_catalog_conf_and_s3() -> None:
    conf = spark_catalog_conf(
        "postgresql+asyncpg://floe:s3cret@db.internal:5433/floe",
        "s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1"
        "&access_key_id=AK&secret_access_key=SK",
    )
    p = "spark.sql.catalog.floe"
    assert conf[f"{p}.uri"] == "jdbc:postgresql://db.internal:5433/floe"
    assert conf[f"{p}.jdbc.user"] == "floe"
    assert conf[f"{p}.jdbc.password"] == "s3cret"
    assert conf[f"{p}.warehouse"] == "s3://bucket/prefix/iceberg"
    assert conf[f"{p}.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf[f"{p}.s3.endpoint"] == "http://127.0.0.1:9000"
    assert conf[f"{p}.s3.path-style-access"] == "true"
    assert conf[f"{p}.client.region"] == "us-east-1"
    assert conf[f"{p}.s3.access-key-id"] == "AK"


def test_runtime_and_jars() -> None:
    assert newest_runtime_spark() == "4.1"
    assert runtime_for("4.1.4") == "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
    assert runtime_for("4.3.0") is None  # Spark 4.2+: no published runtime yet
    jars = spark_jars("4.1.4", "sqlite:////d/meta.db", "file:///d/objects")
    assert jars[1].startswith("org.xerial:sqlite-jdbc:")
    jars = spark_jars("4.1.1", "postgresql://h/db", "s3://b/p")
    assert jars[1].startswith("org.postgresql:postgresql:")
    assert jars[2] == "org.apache.iceberg:iceberg-aws-bundle:1.12.0"
    with pytest.raises(LookupError, match=r"newest: Spark 4\.1"):
        spark_jars("4.3.0", "sqlite:////d/meta.db", "file:///d/objects")


def test_cli_spark_conf(capsys: pytest.CaptureFixture[str]) -> None:
    from floe_cli.main import main

    argv = ["compactor", "--metastore", "sqlite:////d/meta.db", "--objects", "file:///d/objects"]
    assert main([*argv, "spark-conf"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("--packages org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:")
    assert "--conf spark.sql.catalog.floe.uri=jdbc:sqlite:/d/meta.db" in lines
    assert main([*argv, "spark-conf", "--spark-version", "4.3.0"]) == 2
    assert "no iceberg-spark-runtime for Spark 4.3.0" in capsys.readouterr().err
