"""Avro values in the Confluent wire format, with writer schemas from a registry.

Where it sits: beside :mod:`objectstore.typed_values`; the compactor's Parquet
writer (:mod:`compactor.execute`) calls :func:`add_registry_avro_columns` for a
topic with ``floe.value.format=avro`` and ``floe.value.schema.registry.url``.
Each value is ``0x00`` (magic byte), a 4-byte big-endian schema id, then the Avro
binary body written with that schema. The writer schema is fetched once per id
from a Confluent-compatible registry (``GET {url}/schemas/ids/{id}``) and cached
for the life of the process: a registry never changes the schema behind an id.

The table gets the same two columns as for Avro with the schema given
(``value_json`` typed, ``value_error`` the dead letter). The columns are the
union of the writer schemas seen in the file, in schema-id order, so a later
schema that adds an optional field adds a nullable column (Iceberg schema
evolution; older files untouched, their rows read the new column as null).

Dead letters (``value_json`` null, ``value_error`` says why, the raw value kept
in ``value`` as always): a value shorter than 5 bytes or whose magic byte is not
0, a schema id the registry does not know (404), a schema that is not Avro, a
body that does not decode with its writer schema (or leaves trailing bytes).

An unreachable registry (connection error, timeout, 5xx) is NOT a dead letter
at first: :class:`RegistryUnavailable` fails the compaction task, the batches
stay in their segments (Kafka readers see nothing different), the other tasks go
on and the next pass retries. So that a registry that is gone for good does not
hold the partition's table back forever, once the task's oldest batch was
appended more than ``floe.value.schema.registry.wait.ms`` ago (default one hour)
the values whose schema cannot be fetched become dead letters
("schema registry unreachable: ...") and compaction moves on.
"""

from __future__ import annotations

import asyncio
import json
import struct
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any

from objectstore.json_values import _merge
from objectstore.typed_values import AvroDecoder, append_typed, plain

if TYPE_CHECKING:
    import pyarrow as pa

MAGIC = 0
HEADER = struct.Struct(">bI")
DEFAULT_WAIT_MS = 3_600_000
TIMEOUT_S = 10.0

# (registry url, schema id) -> the schema's JSON text; ids are immutable.
_CACHE: dict[tuple[str, int], str] = {}


class RegistryUnavailable(RuntimeError):
    """The registry did not answer (retry later); not the record's fault."""


class UnknownSchema(ValueError):
    """The registry answered that it has no such schema (or no Avro one)."""


def parse_wire(raw: bytes) -> tuple[int, bytes]:
    """``(schema id, Avro body)`` of a Confluent wire-format value."""
    if len(raw) < HEADER.size:
        raise ValueError(f"{len(raw)} byte(s): too short for the Confluent wire format")
    magic, schema_id = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise ValueError(f"magic byte {magic & 0xFF} is not 0 (not Confluent wire format)")
    return schema_id, raw[HEADER.size :]


def _get(url: str, schema_id: int) -> str:
    """The schema text of ``schema_id`` (blocking HTTP)."""
    req = urllib.request.Request(
        f"{url.rstrip('/')}/schemas/ids/{schema_id}",
        headers={"Accept": "application/vnd.schemaregistry.v1+json, application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            doc = json.loads(resp.read())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise UnknownSchema(f"schema id {schema_id} not in the registry") from e
        raise RegistryUnavailable(f"registry answered HTTP {e.code}") from e
    except (OSError, ValueError) as e:  # refused, timed out, reset, not JSON
        raise RegistryUnavailable(f"{type(e).__name__}: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("schema"), str):
        raise RegistryUnavailable("registry answer has no schema")
    if doc.get("schemaType", "AVRO") != "AVRO":
        raise UnknownSchema(f"schema id {schema_id} is {doc['schemaType']}, not AVRO")
    return str(doc["schema"])


async def fetch_schemas(url: str, ids: set[int]) -> dict[int, str | Exception]:
    """Each id's schema text, or the exception that says why not (cached texts first)."""
    out: dict[int, str | Exception] = {}
    for schema_id in sorted(ids):
        cached = _CACHE.get((url, schema_id))
        if cached is not None:
            out[schema_id] = cached
            continue
        try:
            text = await asyncio.to_thread(_get, url, schema_id)
        except (RegistryUnavailable, UnknownSchema) as e:
            out[schema_id] = e
            if isinstance(e, RegistryUnavailable):
                # One refused connection says enough about the others of this pass.
                for rest in ids - out.keys():
                    out[rest] = e
                break
            continue
        _CACHE[(url, schema_id)] = text
        out[schema_id] = text
    return out


def _decoders(
    schemas: dict[int, str | Exception],
) -> tuple[dict[int, AvroDecoder | Exception], dict[str, Any]]:
    decoders: dict[int, AvroDecoder | Exception] = {}
    merged: dict[str, Any] = {"type": "object", "properties": {}}
    for schema_id in sorted(schemas):
        text = schemas[schema_id]
        if isinstance(text, Exception):
            decoders[schema_id] = text
            continue
        try:
            dec = AvroDecoder(text)
        except Exception as e:  # an Avro schema fastavro refuses: its values are dead letters
            decoders[schema_id] = UnknownSchema(f"schema id {schema_id} unusable: {e}")
            continue
        decoders[schema_id] = dec
        if dec.json_schema.get("type") == "object":
            merged = _merge(merged, json.loads(json.dumps(dec.json_schema))) or merged
    return decoders, merged


async def add_registry_avro_columns(table: pa.Table, url: str, *, give_up: bool) -> pa.Table:
    """``table`` with :data:`VALUE_JSON` and :data:`VALUE_ERROR` for wire-format
    Avro values. Raises :class:`RegistryUnavailable` when a needed schema cannot be
    fetched, unless ``give_up`` (then those values are dead letters)."""
    values = table["value"].to_pylist()
    framed: list[tuple[int, bytes] | str] = []
    for raw in values:
        if raw is None:
            framed.append("null value")
            continue
        try:
            framed.append(parse_wire(raw))
        except ValueError as e:
            framed.append(f"not avro: {e}")
    ids = {f[0] for f in framed if isinstance(f, tuple)}
    schemas = await fetch_schemas(url, ids)
    down = [e for e in schemas.values() if isinstance(e, RegistryUnavailable)]
    if down and not give_up:
        raise down[0]
    decoders, merged = _decoders(schemas)
    docs: list[Any] = []
    errors: list[str | None] = []
    for f in framed:
        if isinstance(f, str):
            docs.append(None)
            errors.append(f)
            continue
        dec = decoders[f[0]]
        if isinstance(dec, RegistryUnavailable):
            docs.append(None)
            errors.append(f"schema registry unreachable: {dec}"[:500])
            continue
        if isinstance(dec, Exception):
            docs.append(None)
            errors.append(f"not avro: {dec}"[:500])
            continue
        try:
            docs.append(plain(dec.decode(f[1]), dec.json_schema))
            errors.append(None)
        except Exception as e:  # any decoder failure makes a dead letter, never a crash
            docs.append(None)
            errors.append(f"not avro (schema id {f[0]}): {type(e).__name__}: {e}"[:500])
    return append_typed(table, docs, errors, merged)
