"""Typed columns for Avro and protobuf record values (``floe.value.format``).

Where it sits: beside :mod:`objectstore.json_values`, which the compactor's
Parquet writer (:mod:`compactor.execute`) calls for ``json`` topics. For
``avro`` (``floe.value.avro.schema``: the writer's schema, values in Avro's
binary encoding) and ``protobuf`` (``floe.value.protobuf.descriptor``: a
base64 ``FileDescriptorSet``, ``floe.value.protobuf.message``: the message's
full name) each value is decoded into a plain document and the schema turned
into a JSON Schema; then the JSON path types the columns, so the table gets the
same two columns::

    value_json  struct<...>   the value's fields, typed (whatever the format)
    value_error string        why the value does not decode (dead letter)

A value that does not decode (bad bytes, trailing bytes, a field out of range)
is never dropped: ``value_json`` is null and ``value_error`` says why. Types:
Avro int/long and protobuf integers -> long, float/double -> double, boolean,
string; bytes/fixed -> base64 string; enums -> their symbol; records/messages
-> struct; arrays/repeated -> list; maps, multi-type unions, logical types and
recursive messages past their first level -> string (JSON text or ISO form).
The schema is fixed by the topic's setting, so changing it to one with a new
optional field adds the column (schema evolution, older files untouched).
"""

from __future__ import annotations

import base64
import datetime
import io
import json
from typing import TYPE_CHECKING, Any

from objectstore.json_values import VALUE_ERROR, VALUE_JSON, fit_docs, schema_to_arrow

if TYPE_CHECKING:
    import pyarrow as pa

_STRING: dict[str, Any] = {"type": "string"}
_BUILDING = "x-floe-building"


def _text(v: Any) -> str:
    if isinstance(v, bytes | bytearray):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, datetime.datetime | datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, dict | list):
        return json.dumps(v, default=_text, sort_keys=True)
    return str(v)


def plain(v: Any, schema: dict[str, Any]) -> Any:
    """``v`` as the JSON path expects it for ``schema`` (strings where the schema
    says string, whatever the decoder returned)."""
    if v is None:
        return None
    t = schema.get("type")
    if t == "object" and isinstance(v, dict):
        return {k: plain(v.get(k), s) for k, s in (schema.get("properties") or {}).items()}
    if t == "array" and isinstance(v, list):
        items = schema.get("items") or _STRING
        return [plain(x, items) for x in v]
    if t == "string" and not isinstance(v, str):
        return _text(v)
    return v


# -- Avro -----------------------------------------------------------------------------

_AVRO_PRIMITIVES = {
    "int": {"type": "integer"},
    "long": {"type": "integer"},
    "float": {"type": "number"},
    "double": {"type": "number"},
    "boolean": {"type": "boolean"},
    "string": _STRING,
    "bytes": _STRING,
    "null": None,
}


def avro_to_json_schema(schema: Any, named: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema of an Avro schema (parsed JSON); ``named`` collects named types."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return dict(_AVRO_PRIMITIVES[schema] or _STRING)
        ref = named.get(schema) or named.get(schema.rsplit(".", 1)[-1])
        if ref is None or ref.get(_BUILDING):
            return dict(_STRING)  # unknown, or a record inside itself (recursive)
        return ref
    if isinstance(schema, list):  # a union
        branches = [b for b in schema if b != "null"]
        return avro_to_json_schema(branches[0], named) if len(branches) == 1 else dict(_STRING)
    if not isinstance(schema, dict):
        return dict(_STRING)
    t = schema.get("type")
    if schema.get("logicalType") is not None:
        return dict(_STRING)  # decimals, timestamps, dates, uuids: their text form
    if t == "record":
        out: dict[str, Any] = {"type": "object", "properties": {}, _BUILDING: True}
        name = str(schema.get("name", ""))
        named[name] = named[name.rsplit(".", 1)[-1]] = out
        for f in schema.get("fields") or ():
            out["properties"][f["name"]] = avro_to_json_schema(f["type"], named)
        del out[_BUILDING]
        return out
    if t == "array":
        return {"type": "array", "items": avro_to_json_schema(schema.get("items"), named)}
    if t in ("enum", "fixed", "map"):
        if "name" in schema:
            named[str(schema["name"])] = dict(_STRING)
        return dict(_STRING)
    return avro_to_json_schema(t, named)


class AvroDecoder:
    """Decodes Avro binary values written with the topic's schema."""

    def __init__(self, schema_text: str) -> None:
        import fastavro

        raw = json.loads(schema_text)
        self.parsed = fastavro.parse_schema(raw)
        self.json_schema = avro_to_json_schema(raw)

    def decode(self, raw: bytes) -> Any:
        import fastavro

        buf = io.BytesIO(raw)
        doc = fastavro.schemaless_reader(buf, self.parsed, None)
        if buf.tell() != len(raw):
            raise ValueError(f"{len(raw) - buf.tell()} trailing byte(s) after the record")
        return doc


# -- protobuf -------------------------------------------------------------------------


def _proto_field_schema(f: Any, seen: frozenset[str]) -> dict[str, Any]:
    from google.protobuf.descriptor import FieldDescriptor as F

    if f.type == F.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
        return dict(_STRING)  # a map: JSON text
    if f.type in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        one: dict[str, Any] = {"type": "number"}
    elif f.type == F.TYPE_BOOL:
        one = {"type": "boolean"}
    elif f.type in (F.TYPE_STRING, F.TYPE_BYTES, F.TYPE_ENUM):
        one = dict(_STRING)
    elif f.type == F.TYPE_MESSAGE:
        one = proto_to_json_schema(f.message_type, seen)
    else:
        one = {"type": "integer"}
    return {"type": "array", "items": one} if f.is_repeated else one


def proto_to_json_schema(desc: Any, seen: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The JSON Schema of a protobuf message descriptor (a recursive message is a
    string, its JSON text, past its first level)."""
    if desc.full_name in seen:
        return dict(_STRING)
    inner = seen | {desc.full_name}
    return {
        "type": "object",
        "properties": {f.name: _proto_field_schema(f, inner) for f in desc.fields},
    }


def _proto_value(f: Any, v: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    if f.type == F.TYPE_ENUM:
        ev = f.enum_type.values_by_number.get(v)
        return ev.name if ev is not None else str(v)
    if f.type == F.TYPE_MESSAGE:
        return proto_doc(v)
    return v


def proto_doc(msg: Any) -> dict[str, Any]:
    """A message as a plain document (field names as in the .proto)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    out: dict[str, Any] = {}
    for f in msg.DESCRIPTOR.fields:
        v = getattr(msg, f.name)
        if f.type == F.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            out[f.name] = {str(k): _proto_value(vf, x) for k, x in v.items()}
        elif f.is_repeated:
            out[f.name] = [_proto_value(f, x) for x in v]
        elif f.type == F.TYPE_MESSAGE and not msg.HasField(f.name):
            out[f.name] = None
        else:
            out[f.name] = _proto_value(f, v)
    return out


class ProtobufDecoder:
    """Decodes protobuf values of one message type from a ``FileDescriptorSet``."""

    def __init__(self, settings_text: str) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        settings = json.loads(settings_text)
        fds = descriptor_pb2.FileDescriptorSet.FromString(
            base64.b64decode(settings["descriptor"])
        )
        pool = descriptor_pool.DescriptorPool()
        for fd in fds.file:
            pool.Add(fd)
        desc = pool.FindMessageTypeByName(settings["message"])
        self.cls = message_factory.GetMessageClass(desc)
        self.json_schema = proto_to_json_schema(desc)

    def decode(self, raw: bytes) -> Any:
        return proto_doc(self.cls.FromString(raw))


def decoder(value_format: str, settings: str) -> AvroDecoder | ProtobufDecoder:
    return AvroDecoder(settings) if value_format == "avro" else ProtobufDecoder(settings)


def add_typed_columns(table: pa.Table, value_format: str, settings: str) -> pa.Table:
    """``table`` with :data:`VALUE_JSON` and :data:`VALUE_ERROR` for Avro or protobuf values."""
    dec = decoder(value_format, settings)
    docs: list[Any] = []
    errors: list[str | None] = []
    for raw in table["value"].to_pylist():
        if raw is None:
            docs.append(None)
            errors.append("null value")
            continue
        try:
            docs.append(plain(dec.decode(raw), dec.json_schema))
            errors.append(None)
        except Exception as e:  # any decoder failure makes a dead letter, never a crash
            docs.append(None)
            errors.append(f"not {value_format}: {type(e).__name__}: {e}"[:500])
    schema = {"type": "object", "properties": dec.json_schema.get("properties") or {}}
    return append_typed(table, docs, errors, schema)


def append_typed(
    table: pa.Table, docs: list[Any], errors: list[str | None], schema: dict[str, Any]
) -> pa.Table:
    """The decoded documents fitted to ``schema`` as the typed value column (none if
    the schema has no fields) and the dead-letter column."""
    import pyarrow as pa

    rows, errors, schema = fit_docs(docs, errors, schema)
    struct = schema_to_arrow(schema)
    if struct.num_fields == 0:
        return table.append_column(VALUE_ERROR, pa.array(errors, pa.string()))
    table = table.append_column(VALUE_JSON, pa.array(rows, struct))
    return table.append_column(VALUE_ERROR, pa.array(errors, pa.string()))
