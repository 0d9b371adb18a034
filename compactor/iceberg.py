"""Iceberg commits of the compactor: one table per ``floe.iceberg.enable`` topic.

Where it sits: the compactor pass (:mod:`compactor.runner`) calls this driver-side
step around the Parquet phase. The Parquet objects the executors wrote (the very
files the agent serves Kafka fetches from) are registered as the table's data
files from their footers (:func:`objectstore.iceberg_layout.data_file`): no
second copy is written.

Order of a Parquet phase (crash-safe in every gap)::

    PUT Parquet -> commit the snapshot (append) -> swap the batch rows

and :meth:`IcebergSync.reconcile` before and after it makes the table's current
files equal the metastore's live Parquet objects of the topic: a file committed
but never swapped (crash, or a compare-and-swap conflict) leaves the table in
the next snapshot; a live file missing from the table is added. Retention and
DeleteRecords retire objects in the metastore, reconcile drops them from the
table (Iceberg metadata first), and :meth:`IcebergSync.expire_for` expires the
snapshots still referencing an object right before the GC deletes it (the files
after the grace period).

Catalogs are chosen by URL (:func:`open_catalog`): the SQL catalog in the
metastore's own database by default, ``rest+https://...`` and ``glue://`` as
options. pyiceberg is synchronous: every call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from compactor.planner import iceberg_enabled, topic_setting
from compactor.tasks import ParquetTask, Task, TaskResult
from metastore.protocol import Metastore
from metastore.types import TopicInfo
from objectstore import iceberg_layout as layout

log = logging.getLogger(__name__)

WAREHOUSE_PREFIX = "iceberg/"


def catalog_db_url(metastore_url: str) -> str:
    """The synchronous SQLAlchemy URL of the metastore's database (pyiceberg's SQL
    catalog keeps its two tables there: no new service)."""
    scheme, _, rest = metastore_url.partition("://")
    base = scheme.split("+")[0].lower()
    if base == "sqlite":
        sep = "&" if "?" in rest else "?"
        return f"sqlite://{rest}{sep}timeout=30"  # share the file with the metastore
    if base in ("postgresql", "postgres"):
        return f"postgresql+psycopg2://{rest}"
    raise ValueError(f"no SQL catalog for metastore URL scheme {scheme}://")


def _fileio_props(objects_url: str) -> dict[str, str]:
    parts = urlsplit(objects_url)
    if parts.scheme.lower() != "s3":
        return {}
    q = dict(parse_qsl(parts.query))
    props = {}
    for ours, theirs in (
        ("endpoint", "s3.endpoint"),
        ("region", "s3.region"),
        ("access_key_id", "s3.access-key-id"),
        ("secret_access_key", "s3.secret-access-key"),
        ("session_token", "s3.session-token"),
    ):
        if q.get(ours):
            props[theirs] = q[ours]
    return props


def _sql_catalog(uri: str, props: dict[str, str], attempts: int = 3) -> Any:
    """pyiceberg's SQL catalog, safe when several processes open a new one at once
    (the dev compactor, a reader, a second compactor): pyiceberg checks for its two
    tables and then creates them, so the loser of that race gets "table ...
    already exists" (SQLite) or a duplicate ``pg_type`` key (Postgres). The tables
    exist by then; open again."""
    from pyiceberg.catalog import load_catalog
    from sqlalchemy.exc import DBAPIError

    for attempt in range(attempts):
        try:
            return load_catalog("floe", type="sql", uri=uri, **props)
        except DBAPIError as e:
            msg = str(e.orig).lower()
            if attempt == attempts - 1 or not ("already exists" in msg or "duplicate key" in msg):
                raise
            log.info("iceberg catalog tables created concurrently; opening again")
    raise AssertionError("unreachable")


def open_catalog(url: str, metastore_url: str, objects_url: str) -> Any:
    """A pyiceberg catalog by URL: ``""``/``sql`` (the metastore's database),
    ``sql+<sqlalchemy url>``, ``rest+http(s)://host/path``, ``glue://[?region=..]``."""
    from pyiceberg.catalog import load_catalog

    warehouse = layout.warehouse_location(objects_url, WAREHOUSE_PREFIX.rstrip("/"))
    props: dict[str, str] = {"warehouse": warehouse, **_fileio_props(objects_url)}
    scheme = url.split("://")[0].lower() if "://" in url else url.lower()
    if scheme in ("", "sql"):
        return _sql_catalog(catalog_db_url(metastore_url), props)
    if scheme.startswith("sql+"):
        return _sql_catalog(url[4:], props)
    if scheme.startswith("rest+"):
        return load_catalog("floe", type="rest", uri=url[5:], **props)
    if scheme == "glue":
        q = dict(parse_qsl(urlsplit(url).query))
        if "region" in q:
            props["glue.region"] = q["region"]
        return load_catalog("floe", type="glue", **props)
    raise ValueError(
        f"unsupported Iceberg catalog URL {url!r} (sql, sql+..., rest+http..., glue://)"
    )


@dataclass(slots=True)
class IcebergSummary:
    snapshots: int = 0
    files_added: int = 0
    files_removed: int = 0
    snapshots_expired: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _File:
    key: str
    size: int | None  # None: ask the file system


class IcebergSync:
    """Keeps each Iceberg topic's table equal to its live Parquet objects."""

    def __init__(
        self,
        meta: Metastore,
        catalog: Any,
        objects_url: str,
        *,
        namespace: str = layout.DEFAULT_NAMESPACE,
    ) -> None:
        """``catalog``: a pyiceberg catalog, or a callable opening one on first use
        (so a compactor with no Iceberg topic never creates the catalog's tables)."""
        self.meta = meta
        self._catalog = catalog
        self.objects_url = objects_url
        self.namespace = namespace
        self.summary = IcebergSummary()

    @classmethod
    def from_urls(
        cls, meta: Metastore, catalog_url: str, metastore_url: str, objects_url: str
    ) -> IcebergSync:
        return cls(meta, lambda: open_catalog(catalog_url, metastore_url, objects_url), objects_url)

    @property
    def catalog(self) -> Any:
        if callable(self._catalog) and not hasattr(self._catalog, "load_table"):
            self._catalog = self._catalog()
        return self._catalog

    # -- tables ---------------------------------------------------------------------

    def identifier(self, topic: str) -> tuple[str, str]:
        return (self.namespace, layout.table_name(topic))

    def _table(self, topic: TopicInfo) -> Any:
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError

        ident = self.identifier(topic.name)
        try:
            table = self.catalog.load_table(ident)
        except NoSuchTableError:
            try:
                self.catalog.create_namespace(self.namespace)
            except NamespaceAlreadyExistsError:
                pass
            schema = layout.kafka_iceberg_schema()
            table = self.catalog.create_table(
                ident,
                schema=schema,
                partition_spec=layout.partition_spec(),
                sort_order=layout.sort_order(),
                properties={
                    "schema.name-mapping.default": schema.name_mapping.model_dump_json(),
                    "write.metadata.delete-after-commit.enabled": "true",
                    "write.metadata.previous-versions-max": "20",
                    "floe.topic": topic.name,
                    "floe.topic_id": str(topic.id),
                },
            )
            log.info("iceberg: created table %s for topic %s", ".".join(ident), topic.name)
        return table

    def _location(self, key: str) -> str:
        return layout.object_location(self.objects_url, key)

    async def _live(self, topic: TopicInfo) -> dict[str, _File]:
        out: dict[str, _File] = {}
        for p in range(topic.partitions):
            for f in await self.meta.list_parquet_files(topic.id, p):
                out[self._location(f.object_key)] = _File(f.object_key, None)
        return out

    # -- commits --------------------------------------------------------------------

    def _sync(self, topic: TopicInfo, want: Mapping[str, _File], operation: str) -> None:
        """One snapshot making the table's files ``want`` (none if already equal)."""
        import pyarrow.parquet as pq

        table = self._table(topic)
        current = {t.file.file_path: t.file for t in table.scan().plan_files()}
        add = [loc for loc in want if loc not in current]
        remove = [loc for loc in current if loc not in want]
        if not add and not remove:
            return
        footers = []
        for loc in add:
            inp = table.io.new_input(loc)
            with inp.open() as f:
                md = pq.read_metadata(f)
            footers.append((loc, want[loc].size or len(inp), md))
        self._evolve(table, [md for _, _, md in footers])
        table = self.catalog.load_table(self.identifier(topic.name))
        props = {"floe.operation": operation}
        with table.transaction() as tx:
            if remove:
                # An overwrite also when it only removes files: pyiceberg's delete
                # producer works by row filter, not by file.
                with tx.update_snapshot(snapshot_properties=props).overwrite() as o:
                    for loc in remove:
                        o.delete_data_file(current[loc])
                    for loc, size, md in footers:
                        o.append_data_file(layout.data_file(tx.table_metadata, loc, size, md))
            else:
                with tx.update_snapshot(snapshot_properties=props).fast_append() as o:
                    for loc, size, md in footers:
                        o.append_data_file(layout.data_file(tx.table_metadata, loc, size, md))
        self.summary.snapshots += 1
        self.summary.files_added += len(add)
        self.summary.files_removed += len(remove)
        log.info(
            "iceberg: %s %s: +%d -%d file(s)",
            ".".join(self.identifier(topic.name)),
            operation,
            len(add),
            len(remove),
        )

    def _evolve(self, table: Any, footers: Sequence[Any]) -> None:
        """New typed value fields (or the value columns themselves) become optional
        columns of the table: schema evolution by name, older files untouched."""
        have = {f.name for f in table.schema().fields}
        extra = []
        for md in footers:
            arrow = md.schema.to_arrow_schema()
            for name in (layout.VALUE_JSON, layout.VALUE_ERROR):
                if name in arrow.names:
                    extra.append(arrow.field(name))
        if not extra:
            return
        import pyarrow as pa

        merged: dict[str, Any] = {}
        for f in extra:
            merged[f.name] = f if f.name not in merged else _union_field(merged[f.name], f)
        current = {f.name: f for f in table.schema().as_arrow()}
        if all(name in have and _covers(current[name], f) for name, f in merged.items()):
            return
        with table.update_schema() as u:
            u.union_by_name(pa.schema(list(merged.values())))

    async def reconcile(self, topics: Iterable[TopicInfo], operation: str = "reconcile") -> None:
        for topic in topics:
            if not iceberg_enabled(topic):
                continue
            try:
                want = await self._live(topic)
                await asyncio.to_thread(self._sync, topic, want, operation)
            except Exception as e:  # the log is unaffected; the next pass retries
                log.warning("iceberg: %s: %r", topic.name, e)
                self.summary.errors.append(f"{topic.name}: {e!r}")

    async def commit_parquet(
        self,
        topics: Mapping[uuid.UUID, TopicInfo],
        tasks: Sequence[Task],
        results: Sequence[TaskResult | BaseException],
    ) -> None:
        """The snapshot of a Parquet phase, before its swaps: live files plus the new ones
        (those of results that the swap then refuses leave at the next reconcile)."""
        new: dict[uuid.UUID, dict[str, _File]] = {}
        for task, res in zip(tasks, results, strict=True):
            if not isinstance(task, ParquetTask) or isinstance(res, BaseException):
                continue
            topic = topics.get(task.topic_id)
            if topic is None or not iceberg_enabled(topic):
                continue
            sizes = {o.key: o.size for o in res.new_objects}
            for f in res.parquet_files:
                new.setdefault(topic.id, {})[self._location(f.object_key)] = _File(
                    f.object_key, sizes.get(f.object_key)
                )
        for tid, files in new.items():
            topic = topics[tid]
            try:
                want = {**await self._live(topic), **files}
                await asyncio.to_thread(self._sync, topic, want, "parquet")
            except Exception as e:
                log.warning("iceberg: %s: %r", topic.name, e)
                self.summary.errors.append(f"{topic.name}: {e!r}")

    async def task_value_schema(self, topic: TopicInfo) -> str | None:
        table = await asyncio.to_thread(self._table, topic)
        return value_schema_for(topic, table.schema())

    # -- deletes --------------------------------------------------------------------

    async def expire_for(self, topics: Iterable[TopicInfo], keys: Sequence[str]) -> None:
        """Expire every snapshot (but the current one) that references one of the
        objects ``keys``, before those objects are deleted: time travel never meets
        a missing file."""
        locs = {self._location(k) for k in keys}
        for topic in topics:
            if not iceberg_enabled(topic):
                continue
            try:
                n = await asyncio.to_thread(self._expire, topic, locs)
                self.summary.snapshots_expired += n
            except Exception as e:
                log.warning("iceberg: expire %s: %r", topic.name, e)
                self.summary.errors.append(f"{topic.name}: {e!r}")

    def _expire(self, topic: TopicInfo, locs: set[str]) -> int:
        table = self._table(topic)
        cur = table.current_snapshot()
        doomed = []
        for snap in table.snapshots():
            if cur is not None and snap.snapshot_id == cur.snapshot_id:
                continue
            files = {
                t.file.file_path for t in table.scan(snapshot_id=snap.snapshot_id).plan_files()
            }
            if files & locs:
                doomed.append(snap.snapshot_id)
        if doomed:
            table.maintenance.expire_snapshots().by_ids(doomed).commit()
        return len(doomed)

    async def collect_metadata_orphans(
        self, topics: Iterable[TopicInfo], grace_ms: int, now_ms: int
    ) -> list[str]:
        """Delete the metadata files under each table's ``metadata/`` that no metadata
        JSON, snapshot or manifest of the table reaches any more (expired snapshots'
        manifest lists and manifests) and that are older than ``grace_ms``: the
        orphan GC of Iceberg files. Data files are metastore objects (their own GC)."""
        out: list[str] = []
        for topic in topics:
            if not iceberg_enabled(topic):
                continue
            try:
                out += await asyncio.to_thread(self._metadata_orphans, topic, grace_ms, now_ms)
            except Exception as e:
                log.warning("iceberg: metadata GC %s: %r", topic.name, e)
                self.summary.errors.append(f"{topic.name}: {e!r}")
        return out

    def _metadata_orphans(self, topic: TopicInfo, grace_ms: int, now_ms: int) -> list[str]:
        from pyarrow.fs import FileSelector, FileType

        table = self._table(topic)
        keep = {_norm(x) for x in self.referenced_metadata([topic])}
        scheme, netloc, path = table.io.parse_location(table.location())
        fs = table.io.fs_by_scheme(scheme, netloc)
        base = f"{path.rstrip('/')}/metadata"
        infos = fs.get_file_info(FileSelector(base, recursive=True, allow_not_found=True))
        doomed = []
        for info in infos:
            if info.type != FileType.File:
                continue
            mtime = info.mtime.timestamp() * 1000 if info.mtime is not None else now_ms
            if _norm(info.path) in keep or mtime > now_ms - grace_ms:
                continue
            doomed.append(info.path)
        for p in doomed:
            fs.delete_file(p)
        return doomed

    def referenced_metadata(self, topics: Iterable[TopicInfo]) -> set[str]:
        """Locations of every metadata file the tables still reach (metadata JSONs
        in their logs, manifest lists, manifests)."""
        out: set[str] = set()
        for topic in topics:
            if not iceberg_enabled(topic):
                continue
            table = self._table(topic)
            md = table.metadata
            out.add(table.metadata_location)
            out.update(e.metadata_file for e in md.metadata_log)
            for snap in md.snapshots:
                out.add(snap.manifest_list)
                out.update(m.manifest_path for m in snap.manifests(table.io))
        return out


def _norm(location: str) -> str:
    """A location without its scheme and authority (``file:///a/b`` -> ``/a/b``,
    ``s3://bucket/k`` -> ``bucket/k``), as pyarrow file systems name files."""
    if "://" not in location:
        return location
    return location.split("://", 1)[1]


def _covers(have: Any, want: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_struct(want.type):
        if not pa.types.is_struct(have.type):
            return False
        names = {f.name: f for f in have.type}
        return all(f.name in names and _covers(names[f.name], f) for f in want.type)
    return True


def _union_field(a: Any, b: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_struct(a.type) and pa.types.is_struct(b.type):
        fields = {f.name: f for f in a.type}
        for f in b.type:
            fields[f.name] = _union_field(fields[f.name], f) if f.name in fields else f
        return pa.field(a.name, pa.struct(list(fields.values())))
    return a


def value_schema_for(topic: TopicInfo, current: Any | None) -> str | None:
    """The JSON Schema handed to a Parquet task: the topic's own, else the table's
    current ``value_json`` fields marked as inferred (so types stay stable)."""
    import json

    given = topic_setting(topic, "floe.value.json.schema")
    if given.strip():
        return given
    if current is None:
        return None
    from objectstore.json_values import INFERRED, arrow_to_schema

    arrow = current.as_arrow()
    if layout.VALUE_JSON not in arrow.names:
        return None
    schema = arrow_to_schema(arrow.field(layout.VALUE_JSON).type)
    schema[INFERRED] = True
    return json.dumps(schema)
