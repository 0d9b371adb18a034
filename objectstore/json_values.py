"""Typed columns for JSON record values (``floe.value.format=json``).

Where it sits: the compactor's Parquet writer (:mod:`compactor.execute`) adds two
columns to a topic's rows before writing the file, the Iceberg table
(:mod:`objectstore.iceberg_layout`) exposes them::

    value_json  struct<...>   the value's fields, typed
    value_error string        why the value is not such an object (dead letter)

The raw ``value`` column stays as produced (the agent rebuilds Kafka records
from it), so a record that does not parse is never dropped: its ``value_json``
is null and ``value_error`` says why.

Types come from a JSON Schema (``floe.value.json.schema``, fixed: fields it does
not name are ignored) or are inferred. Inference starts from the table's
current fields (handed over by the compactor as a JSON Schema with
``"x-floe-inferred": true``): known fields keep their type (a value that does
not fit makes the record a dead letter), new fields are inferred from the
records (``integer`` -> long, ``number`` -> double, ``string``, ``boolean``,
objects -> struct, arrays -> list), and the table gains them as optional
columns (schema evolution, no rewrite of older files).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

VALUE_JSON = "value_json"
VALUE_ERROR = "value_error"
INFERRED = "x-floe-inferred"


class _Mismatch(ValueError):
    pass


def schema_to_arrow(schema: dict[str, Any]) -> pa.DataType:
    """The Arrow type of a JSON Schema fragment (objects -> struct)."""
    import pyarrow as pa

    t = schema.get("type")
    if isinstance(t, list):  # ["string", "null"]
        t = next((x for x in t if x != "null"), "string")
    if t == "object" or (t is None and "properties" in schema):
        props = schema.get("properties") or {}
        return pa.struct([pa.field(k, schema_to_arrow(v)) for k, v in props.items()])
    if t == "array":
        return pa.list_(schema_to_arrow(schema.get("items") or {"type": "string"}))
    return {
        "integer": pa.int64(),
        "number": pa.float64(),
        "boolean": pa.bool_(),
    }.get(str(t), pa.string())


def arrow_to_schema(t: pa.DataType) -> dict[str, Any]:
    """A JSON Schema fragment for an Arrow type (the inverse of :func:`schema_to_arrow`)."""
    import pyarrow as pa

    if pa.types.is_struct(t):
        return {"type": "object", "properties": {f.name: arrow_to_schema(f.type) for f in t}}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "items": arrow_to_schema(t.value_type)}
    if pa.types.is_integer(t):
        return {"type": "integer"}
    if pa.types.is_floating(t):
        return {"type": "number"}
    if pa.types.is_boolean(t):
        return {"type": "boolean"}
    return {"type": "string"}


def _infer(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return {"type": "boolean"}
    if isinstance(v, int):
        return {"type": "integer"}
    if isinstance(v, float):
        return {"type": "number"}
    if isinstance(v, str):
        return {"type": "string"}
    if isinstance(v, dict):
        out: dict[str, Any] = {"type": "object", "properties": {}}
        for k, x in v.items():
            _learn(out, k, x)
        return out
    if isinstance(v, list):
        items: dict[str, Any] | None = None
        for x in v:
            items = _merge(items, _infer(x))
        return {"type": "array", "items": items or {"type": "string"}}
    return {"type": "string"}


def _merge(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """The first type wins; objects merge their properties (new ones appended)."""
    if a is None:
        return b
    if b is None:
        return a
    if a.get("type") == "integer" and b.get("type") == "number":
        return b  # a file's ints widen to double (an Iceberg promotion)
    if a.get("type") == "object" and b.get("type") == "object":
        for k, x in b.get("properties", {}).items():
            a["properties"][k] = _merge(a["properties"].get(k), x) or x
    return a


def _learn(schema: dict[str, Any], key: str, value: Any) -> None:
    props = schema.setdefault("properties", {})
    if key in props:
        if props[key] is None or props[key].get("type") == "object":
            props[key] = _merge(props[key], _infer(value))
        return
    props[key] = _infer(value)


def _clean(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without the fields only ever seen null (no type known yet)."""
    if "properties" in schema:
        props = {}
        for k, v in (schema["properties"] or {}).items():
            # Empty or dotted names are no column names (Iceberg nests with '.').
            if v is None or not k or "." in k:
                continue
            v = _clean(v)
            if v.get("type") == "object" and not v.get("properties"):
                continue  # an object without known fields yet: no empty struct column
            props[k] = v
        schema["properties"] = props
    if isinstance(schema.get("items"), dict):
        schema["items"] = _clean(schema["items"])
        if schema["items"].get("type") == "object" and not schema["items"].get("properties"):
            schema["items"] = {"type": "string"}
    return schema


def _check(v: Any, schema: dict[str, Any], path: str) -> Any:
    """``v`` fitted to ``schema`` (raises :class:`_Mismatch` when it does not fit)."""
    if v is None:
        return None
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "string")
    if t == "object" or (t is None and "properties" in schema):
        if not isinstance(v, dict):
            raise _Mismatch(f"{path or 'value'}: expected an object")
        props = schema.get("properties") or {}
        for req in schema.get("required") or ():
            if v.get(req) is None:
                raise _Mismatch(f"{path}.{req}: required" if path else f"{req}: required")
        return {k: _check(v.get(k), s, f"{path}.{k}" if path else k) for k, s in props.items()}
    if t == "array":
        if not isinstance(v, list):
            raise _Mismatch(f"{path}: expected an array")
        items = schema.get("items") or {"type": "string"}
        return [_check(x, items, f"{path}[]") for x in v]
    if t == "integer":
        if isinstance(v, bool) or not isinstance(v, int) or not -(2**63) <= v < 2**63:
            raise _Mismatch(f"{path}: expected an integer")
        return v
    if t == "number":
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise _Mismatch(f"{path}: expected a number")
        return float(v)
    if t == "boolean":
        if not isinstance(v, bool):
            raise _Mismatch(f"{path}: expected a boolean")
        return v
    if not isinstance(v, str):
        raise _Mismatch(f"{path}: expected a string")
    return v


def parse_values(
    values: list[bytes | None], schema_text: str | None
) -> tuple[list[dict[str, Any] | None], list[str | None], dict[str, Any]]:
    """``(rows, errors, schema)``: each value fitted to the schema, or None and the
    reason; the schema is the given one, or the inferred one extended by these values."""
    given: dict[str, Any] = json.loads(schema_text) if schema_text else {INFERRED: True}
    inferred = bool(given.get(INFERRED))
    schema: dict[str, Any] = {"type": "object", "properties": dict(given.get("properties") or {})}
    if "required" in given:
        schema["required"] = given["required"]
    docs: list[Any] = []
    errors: list[str | None] = []
    for raw in values:
        if raw is None:
            docs.append(None)
            errors.append("null value")
            continue
        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            docs.append(None)
            errors.append(f"not JSON: {e}"[:500])
            continue
        if not isinstance(doc, dict):
            docs.append(None)
            errors.append("not a JSON object")
            continue
        if inferred:
            known = given.get("properties") or {}
            for k, v in doc.items():
                cur = schema["properties"].get(k)
                if k not in known or cur is None:
                    schema["properties"][k] = _merge(cur, _infer(v))
                elif cur.get("type") == "object" and isinstance(v, dict):
                    _merge(cur, _infer(v))
        docs.append(doc)
        errors.append(None)
    return fit_docs(docs, errors, schema)


def fit_docs(
    docs: list[Any], errors: list[str | None], schema: dict[str, Any]
) -> tuple[list[dict[str, Any] | None], list[str | None], dict[str, Any]]:
    """``(rows, errors, schema)``: decoded documents fitted to ``schema`` (None and
    the reason for one that does not fit; ``errors`` holds earlier reasons)."""
    errors = list(errors)
    schema = _clean(schema)
    rows: list[dict[str, Any] | None] = []
    for i, doc in enumerate(docs):
        if doc is None:
            rows.append(None)
            continue
        try:
            rows.append(_check(doc, schema, ""))
        except _Mismatch as e:
            rows.append(None)
            errors[i] = str(e)[:500]
    return rows, errors, schema


def add_json_columns(table: pa.Table, schema_text: str | None) -> pa.Table:
    """``table`` with :data:`VALUE_JSON` and :data:`VALUE_ERROR` appended."""
    import pyarrow as pa

    rows, errors, schema = parse_values(table["value"].to_pylist(), schema_text)
    struct = schema_to_arrow(schema)
    if struct.num_fields == 0:
        # No field known yet: an empty struct is not valid Parquet; keep the
        # error column only, the table gains value_json once a field is seen.
        return table.append_column(VALUE_ERROR, pa.array(errors, pa.string()))
    table = table.append_column(VALUE_JSON, pa.array(rows, struct))
    return table.append_column(VALUE_ERROR, pa.array(errors, pa.string()))
