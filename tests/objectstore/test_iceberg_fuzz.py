"""Fuzz the two untrusted inputs of the Iceberg work (issue 17): record values parsed
as JSON (any bytes: typed row or dead letter, never an exception) and the Parquet
footer's batch headers (a damaged one is ignored, never a crash of the fetch path)."""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_protocol.records import RecordBatchView
from objectstore.json_values import VALUE_ERROR, VALUE_JSON, add_json_columns
from objectstore.parquet import (
    BatchInfo,
    decode_batch_infos,
    encode_batch_infos,
    kafka_schema,
    write_table,
)
from objectstore.parquet_batches import BatchHeader, build_batch, encode_rows

json_docs = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)
values = st.lists(
    st.one_of(
        st.none(),
        st.binary(max_size=40),
        json_docs.map(lambda d: json.dumps(d).encode()),
        st.dictionaries(st.sampled_from(["a", "b", "c", "", "x.y"]), json_docs, max_size=3).map(
            lambda d: json.dumps(d).encode()
        ),
    ),
    min_size=1,
    max_size=12,
)


def table(vals: list[bytes | None]) -> pa.Table:
    n = len(vals)
    return pa.table(
        {
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array(vals, pa.binary()),
            "topic": ["t"] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "timestamp": pa.array(
                [1_700_000_000_000_000 + i for i in range(n)], pa.timestamp("us", tz="UTC")
            ),
            "timestampType": pa.array([0] * n, pa.int32()),
            "headers": pa.array([[]] * n, kafka_schema().field("headers").type),
        }
    )


@settings(max_examples=150, deadline=None)
@given(
    values,
    st.sampled_from(
        [
            None,
            '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}',
        ]
    ),
)
def test_any_value_is_typed_or_dead_letter(vals: list[bytes | None], schema: str | None) -> None:
    out = add_json_columns(table(vals), schema)
    write_table(out)  # a valid Parquet file whatever the values
    errors = out[VALUE_ERROR].to_pylist()
    typed = out[VALUE_JSON].to_pylist() if VALUE_JSON in out.column_names else [None] * len(vals)
    assert out["value"].to_pylist() == vals  # the raw value is never touched
    for t, e in zip(typed, errors, strict=True):
        if e is not None:
            assert t is None  # a dead letter has no typed row
        else:  # parsed: typed, unless no field is known yet (no value_json column)
            assert t is not None or VALUE_JSON not in out.column_names


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60) | st.binary(max_size=60).map(lambda b: "1:" + b.hex()))
def test_damaged_footer_is_ignored(text: str) -> None:
    infos = decode_batch_infos(text)
    for i in infos.values():
        BatchHeader.from_info(i)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.builds(
            BatchInfo,
            st.integers(0, 2**40),
            st.integers(0, 0x17),
            st.integers(-1, 2**40),
            st.integers(-1, 2**15 - 1),
            st.integers(-1, 2**31 - 1),
            st.integers(0, 2**31 - 1),
            st.integers(-1, 2**40),
            st.integers(-1, 2**40),
        ),
        max_size=5,
    )
)
def test_footer_roundtrip_and_rebuilt_batch_valid(infos: list[BatchInfo]) -> None:
    back = decode_batch_infos(encode_batch_infos(infos))
    assert back == {i.base_offset: i for i in infos}
    rows = encode_rows(table([b"v1", b"v2", None]))
    for i in infos:
        data = build_batch(rows, 0, 3, 0, 2, BatchHeader.from_info(i))
        view = RecordBatchView(data)
        view.validate()
        assert [r.value for r in view.records()] == [b"v1", b"v2", None]
