"""Spark's view of Floe's Iceberg tables: the catalog settings and jars Spark needs.

Where it sits: the compactor (:mod:`compactor.iceberg`) commits each
``floe.iceberg.enable`` topic as an Iceberg table in pyiceberg's SQL catalog, two
tables in the metastore's own database. Iceberg's Java ``JdbcCatalog`` reads the
same two tables, so Spark reads Floe's tables through its Iceberg catalog with
no new service::

    spark.sql.catalog.floe        org.apache.iceberg.spark.SparkCatalog
    spark.sql.catalog.floe.type   jdbc
    spark.sql.catalog.floe.uri    jdbc:sqlite:/data/meta.db | jdbc:postgresql://host/db

The Spark catalog must be named ``floe``: the JDBC catalog keys its rows by
catalog name, and pyiceberg writes them as ``floe``. Tables are
``floe.floe.<topic>`` (catalog, namespace, table; ``.`` in a topic name becomes
``_``), and Iceberg's SQL works on them (``VERSION AS OF``, ``.snapshots``).

Jars (Maven Central): ``iceberg-spark-runtime-<spark>_2.13`` built for the
Spark line in use, the JDBC driver of the metastore's database, and
``iceberg-aws-bundle`` when the objects live in S3. Iceberg publishes runtimes
up to Spark 4.1 (:data:`SPARK_RUNTIMES`); Spark 4.2 turned
``connector.catalog.View`` from an interface into a class, and the 4.1 runtime
fails on it (``IncompatibleClassChangeError``), so Spark 4.2+ cannot load any
published runtime yet. :func:`runtime_for` says which one fits a Spark version.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

from compactor.iceberg import WAREHOUSE_PREFIX, catalog_db_url
from objectstore import iceberg_layout as layout

CATALOG = "floe"
# Spark line -> newest Iceberg release with an iceberg-spark-runtime for it.
SPARK_RUNTIMES = {"4.1": "1.12.0"}
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.50.3.0"
POSTGRES_JDBC = "org.postgresql:postgresql:42.7.14"


def runtime_for(spark_version: str) -> str | None:
    """The Maven coordinate of the Iceberg runtime for ``spark_version``, or None
    when Iceberg publishes none for that Spark line."""
    line = ".".join(spark_version.split(".")[:2])
    iceberg = SPARK_RUNTIMES.get(line)
    if iceberg is None:
        return None
    return f"org.apache.iceberg:iceberg-spark-runtime-{line}_2.13:{iceberg}"


def newest_runtime_spark() -> str:
    """The newest Spark line an Iceberg runtime exists for (``4.1``)."""
    return max(SPARK_RUNTIMES, key=lambda v: tuple(int(x) for x in v.split(".")))


def jdbc_catalog_uri(metastore_url: str) -> tuple[str, dict[str, str]]:
    """The JDBC URL of the metastore's database and the catalog properties
    carrying its user and password (``jdbc.user``/``jdbc.password``)."""
    from sqlalchemy.engine import make_url

    url = make_url(catalog_db_url(metastore_url))
    props: dict[str, str] = {}
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ValueError("an in-memory SQLite metastore has no catalog Spark can read")
        return f"jdbc:sqlite:{url.database}", props
    host = url.host or "localhost"
    port = f":{url.port}" if url.port else ""
    if url.username:
        props["jdbc.user"] = url.username
    if url.password:
        props["jdbc.password"] = str(url.password)
    query = "&".join(f"{k}={v}" for k, v in url.query.items() if isinstance(v, str))
    return f"jdbc:postgresql://{host}{port}/{url.database or ''}" + (
        f"?{query}" if query else ""
    ), props


def spark_catalog_conf(metastore_url: str, objects_url: str) -> dict[str, str]:
    """Spark settings for the ``floe`` Iceberg catalog over Floe's SQL catalog."""
    uri, props = jdbc_catalog_uri(metastore_url)
    p = f"spark.sql.catalog.{CATALOG}"
    conf = {
        "spark.sql.extensions": (
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
        ),
        p: "org.apache.iceberg.spark.SparkCatalog",
        f"{p}.type": "jdbc",
        f"{p}.uri": uri,
        f"{p}.warehouse": layout.warehouse_location(objects_url, WAREHOUSE_PREFIX.rstrip("/")),
        **{f"{p}.{k}": v for k, v in props.items()},
    }
    parts = urlsplit(objects_url)
    if parts.scheme.lower() == "s3":
        q = dict(parse_qsl(parts.query))
        conf[f"{p}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        for ours, theirs in (
            ("endpoint", "s3.endpoint"),
            ("region", "client.region"),
            ("access_key_id", "s3.access-key-id"),
            ("secret_access_key", "s3.secret-access-key"),
            ("session_token", "s3.session-token"),
        ):
            if q.get(ours):
                conf[f"{p}.{theirs}"] = q[ours]
        if q.get("endpoint"):
            conf[f"{p}.s3.path-style-access"] = "true"
    return conf


def spark_jars(spark_version: str, metastore_url: str, objects_url: str) -> list[str]:
    """Maven coordinates Spark needs on its class path for :func:`spark_catalog_conf`
    (empty runtime: raises, naming the newest Spark line that has one)."""
    runtime = runtime_for(spark_version)
    if runtime is None:
        raise LookupError(
            f"Iceberg publishes no iceberg-spark-runtime for Spark {spark_version} "
            f"(newest: Spark {newest_runtime_spark()})"
        )
    scheme = metastore_url.split("://")[0].split("+")[0].lower()
    coords = [runtime, SQLITE_JDBC if scheme == "sqlite" else POSTGRES_JDBC]
    if urlsplit(objects_url).scheme.lower() == "s3":
        iceberg = runtime.rsplit(":", 1)[1]
        coords.append(f"org.apache.iceberg:iceberg-aws-bundle:{iceberg}")
    return coords
