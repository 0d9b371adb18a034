"""Vectorised rebuild of Kafka batches from Parquet rows: fuzzed against the records
they came from (keys/values/headers with nulls, negative timestamp deltas, gaps left
by key compaction, LogAppendTime), with and without the batch spans known up front."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_protocol.compression import Compression
from kafka_protocol.records import Record, RecordBatchView
from objectstore import parquet as P
from objectstore.parquet_batches import BatchHeader, batches_for_spans, encode_rows

blob = st.one_of(st.none(), st.binary(max_size=300))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=40)))
record = st.tuples(blob, blob, st.integers(-10_000, 10_000), st.lists(header, max_size=3))
batch = st.tuples(
    st.lists(record, min_size=1, max_size=12), st.integers(0, 3), st.sampled_from([0, 1])
)


@settings(max_examples=60, deadline=None)
@given(st.lists(batch, min_size=1, max_size=8), st.booleans())
def test_rebuilt_batches_hold_the_original_records(batches: list, with_spans: bool) -> None:
    decoded, off, t0 = [], 5, 1_700_000_000_000
    for recs, gap, ttype in batches:
        rs = [
            Record(off + i, t0 + dt if ttype == 0 else t0 + 99, k, v, list(hs))
            for i, (k, v, dt, hs) in enumerate(recs)
        ]
        decoded.append(P.DecodedBatch(off, off + len(recs) - 1 + gap, ttype, rs))
        off += len(recs) + gap
    table = P.batches_to_table("t", 0, decoded)
    spans = [(b.base_offset, b.last_offset) for b in decoded]
    known = [(b.base_offset, b.records[0].timestamp - 3) for b in decoded] if with_spans else None
    rows = encode_rows(table, known)
    assert (rows.records is not None) == with_spans
    built = batches_for_spans(rows, spans)
    for b, data in zip(decoded, built, strict=True):
        assert data is not None
        v = RecordBatchView(data)
        v.validate()
        assert (v.base_offset, v.last_offset, v.records_count) == (
            b.base_offset,
            b.last_offset,
            len(b.records),
        )
        assert v.timestamp_type == b.timestamp_type
        got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in v.records()]
        assert got == [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in b.records]
    # The header can carry producer fields and a codec (kept for the Iceberg work).
    h = BatchHeader(producer_id=7, producer_epoch=2, base_sequence=11, codec=Compression.ZSTD)
    one = batches_for_spans(rows, spans[:1], h)[0]
    assert one is not None
    v = RecordBatchView(one)
    v.validate()
    assert (v.producer_id, v.producer_epoch, v.base_sequence, v.compression) == (
        7,
        2,
        11,
        Compression.ZSTD,
    )
    assert [r.value for r in v.records()] == [r.value for r in decoded[0].records]
