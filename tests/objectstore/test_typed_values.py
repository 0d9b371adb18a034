"""Typed columns for Avro and protobuf values (objectstore.typed_values): every
value is a typed row or a dead letter (value_error), never dropped; the columns
written are valid Parquet."""

from __future__ import annotations

import base64
import datetime
import io
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as papq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from objectstore.typed_values import add_typed_columns

fastavro = pytest.importorskip("fastavro")
pytest.importorskip("google.protobuf")

AVRO = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": "int"},
        {"name": "price", "type": "double"},
        {"name": "paid", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "blob", "type": "bytes"},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {
            "name": "ship",
            "type": {
                "type": "record",
                "name": "Ship",
                "fields": [
                    {"name": "city", "type": "string"},
                    {"name": "next", "type": ["null", "Ship"], "default": None},
                ],
            },
        },
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def avro_bytes(doc: dict[str, Any], schema: Any = AVRO) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), doc)
    return buf.getvalue()


def order(i: int) -> dict[str, Any]:
    return {
        "id": i, "item": f"sku-{i}", "qty": i % 4, "price": i * 0.5, "paid": i % 2 == 0,
        "note": None if i % 3 else f"n{i}", "tags": [f"t{i}"], "kind": "AB"[i % 2],
        "blob": bytes([i]), "attrs": {"a": i}, "ship": {"city": "Oslo", "next": None},
        "at": datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC),
    }  # fmt: skip


def table_of(values: list[bytes | None]) -> pa.Table:
    return pa.table({"offset": list(range(len(values))), "value": pa.array(values, pa.binary())})


def roundtrip(t: pa.Table) -> pa.Table:
    buf = io.BytesIO()
    papq.write_table(t, buf)
    return papq.read_table(io.BytesIO(buf.getvalue()))


def test_avro_typed_rows_and_dead_letters() -> None:
    good = [avro_bytes(order(i)) for i in range(5)]
    values = [*good, b"\xff\xff garbage", good[0] + b"\x00", None, good[1][:3]]
    t = roundtrip(add_typed_columns(table_of(values), "avro", json.dumps(AVRO)))
    assert t.num_rows == len(values)  # nothing dropped
    rows = t.to_pylist()
    vj = t.schema.field("value_json").type
    assert vj.field("id").type == pa.int64() and vj.field("price").type == pa.float64()
    assert vj.field("tags").type == pa.list_(pa.string())
    assert vj.field("ship").type.field("city").type == pa.string()
    r = rows[2]["value_json"]
    assert (r["id"], r["item"], r["qty"], r["paid"], r["kind"]) == (2, "sku-2", 2, True, "A")
    assert r["blob"] == base64.b64encode(b"\x02").decode()
    assert json.loads(r["attrs"]) == {"a": 2} and r["at"].startswith("2026-11-26")
    assert rows[0]["value_json"]["note"] == "n0" and rows[1]["value_json"]["note"] is None
    assert all(rows[i]["value_error"] is None for i in range(5))
    for i in range(5, 9):
        assert rows[i]["value_json"] is None and rows[i]["value_error"], rows[i]
    assert "trailing" in rows[6]["value_error"] and rows[7]["value_error"] == "null value"


def protobuf_settings() -> tuple[str, Any]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="shop.proto", package="shop", syntax="proto3")
    fd.enum_type.add(name="Kind").value.add(name="KIND_A", number=0)
    fd.enum_type[0].value.add(name="KIND_B", number=1)
    line = fd.message_type.add(name="Line")
    line.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    line.field.add(name="n", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    msg = fd.message_type.add(name="Order")
    for name, num, typ, label, tn in (
        ("id", 1, F.TYPE_INT64, F.LABEL_OPTIONAL, ""),
        ("item", 2, F.TYPE_STRING, F.LABEL_OPTIONAL, ""),
        ("price", 3, F.TYPE_DOUBLE, F.LABEL_OPTIONAL, ""),
        ("kind", 4, F.TYPE_ENUM, F.LABEL_OPTIONAL, ".shop.Kind"),
        ("lines", 5, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".shop.Line"),
        ("blob", 6, F.TYPE_BYTES, F.LABEL_OPTIONAL, ""),
        ("main", 7, F.TYPE_MESSAGE, F.LABEL_OPTIONAL, ".shop.Line"),
        ("parent", 8, F.TYPE_MESSAGE, F.LABEL_OPTIONAL, ".shop.Order"),
    ):
        f = msg.field.add(name=name, number=num, type=typ, label=label)
        if tn:
            f.type_name = tn
    fds = descriptor_pb2.FileDescriptorSet(file=[fd])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    settings = json.dumps(
        {"descriptor": base64.b64encode(fds.SerializeToString()).decode(), "message": "shop.Order"}
    )
    return settings, cls


def test_protobuf_typed_rows_and_dead_letters() -> None:
    settings, cls = protobuf_settings()
    good = []
    for i in range(4):
        m = cls(id=2**40 + i, item=f"sku-{i}", price=i * 1.5, kind=i % 2, blob=b"\x01")
        m.lines.add(sku="a", n=i)
        if i % 2:
            m.main.sku = "m"
            m.parent.id = 7
        good.append(m.SerializeToString())
    values = [*good, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", good[0][:-2]]
    t = roundtrip(add_typed_columns(table_of(values), "protobuf", settings))
    rows = t.to_pylist()
    assert t.num_rows == 6
    vj = t.schema.field("value_json").type
    assert vj.field("id").type == pa.int64() and vj.field("parent").type == pa.string()
    assert vj.field("lines").type == pa.list_(pa.struct([("sku", pa.string()), ("n", pa.int64())]))
    r = rows[1]["value_json"]
    assert (r["id"], r["item"], r["price"], r["kind"]) == (2**40 + 1, "sku-1", 1.5, "KIND_B")
    assert r["lines"] == [{"sku": "a", "n": 1}] and r["main"] == {"sku": "m", "n": 0}
    assert json.loads(r["parent"])["id"] == 7  # a recursive message: JSON text
    assert rows[0]["value_json"]["main"] is None
    assert all(rows[i]["value_error"] is None for i in range(4))
    for i in (4, 5):
        assert rows[i]["value_json"] is None and rows[i]["value_error"].startswith("not protobuf")


_PB_SETTINGS = protobuf_settings()[0]
_GOOD_AVRO = avro_bytes(order(3))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.binary(max_size=64),
            st.binary(max_size=8).map(lambda b: _GOOD_AVRO + b),
            st.integers(0, len(_GOOD_AVRO)).map(lambda n: _GOOD_AVRO[:n]),
        ),
        min_size=1,
        max_size=12,
    ),
    st.sampled_from(["avro", "protobuf"]),
)
def test_fuzz_any_value_is_typed_or_dead_letter(values: list[bytes | None], fmt: str) -> None:
    settings_text = json.dumps(AVRO) if fmt == "avro" else _PB_SETTINGS
    t = roundtrip(add_typed_columns(table_of(values), fmt, settings_text))
    assert t.num_rows == len(values)
    for r in t.to_pylist():
        assert (r.get("value_json") is None) != (r["value_error"] is None)


def test_topic_config_validation() -> None:
    from metastore.topic_config import validate_config_value as check

    assert check("floe.value.format", "avro") is None
    assert check("floe.value.format", "protobuf") is None
    assert check("floe.value.format", "thrift") is not None
    assert check("floe.value.avro.schema", json.dumps(AVRO)) is None
    assert check("floe.value.avro.schema", '"string"') is not None
    assert check("floe.value.avro.schema", "{not json") is not None
    assert check("floe.value.protobuf.descriptor", "CgA=") is None
    assert check("floe.value.protobuf.descriptor", "not base64!") is not None
