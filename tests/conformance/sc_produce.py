"""Produce scenarios: codecs and mixed codecs, null and empty keys/values/headers,
max.message.bytes and record-too-large, idempotent producer errors (raw
requests with explicit producer ids, epochs and sequences).
"""

from __future__ import annotations

import time
from typing import Any

from kafka_protocol.messages import InitProducerIdRequest, ProduceRequest
from kafka_protocol.records import Compression, RecordBatchBuilder
from tests.conformance._harness import T0, Target, error_name, scenario

PT = ProduceRequest.TopicProduceData
PP = ProduceRequest.TopicProduceData.PartitionProduceData


def _roundtrip(t: Target, tag: str, codec: str, n: int = 20) -> Any:
    topic = t.create(t.topic(tag))
    recs = [(b"k%d" % i, b"value-%d-" % i + b"x" * (i * 37 % 300), T0 + i) for i in range(n)]
    acks = t.produce(topic, recs, **{"compression.type": codec})
    return {"acks": acks, "read": t.consume(topic, n), "wm": list(t.watermarks(topic))}


@scenario
def sc_codec_none(t: Target) -> Any:
    return _roundtrip(t, "c-none", "none")


@scenario
def sc_codec_gzip(t: Target) -> Any:
    return _roundtrip(t, "c-gzip", "gzip")


@scenario
def sc_codec_snappy(t: Target) -> Any:
    return _roundtrip(t, "c-snappy", "snappy")


@scenario
def sc_codec_lz4(t: Target) -> Any:
    return _roundtrip(t, "c-lz4", "lz4")


@scenario
def sc_codec_zstd(t: Target) -> Any:
    return _roundtrip(t, "c-zstd", "zstd")


@scenario
def sc_codec_mixed_in_one_partition(t: Target) -> Any:
    topic = t.create(t.topic("c-mixed"))
    acks = []
    for i, codec in enumerate(["gzip", "none", "zstd", "lz4", "snappy"]):
        acks += t.produce(topic, [(None, b"%s-%d" % (codec.encode(), j), T0 + 10 * i + j) for j in range(3)], **{"compression.type": codec})
    return {"acks": acks, "read": t.consume(topic, 15), "mid": t.consume(topic, 2, offset=7)}


@scenario
def sc_topic_compression_type_config(t: Target) -> Any:
    """A topic with compression.type=gzip still returns what the producer sent."""
    topic = t.create(t.topic("c-topic"), config={"compression.type": "gzip"})
    acks = t.produce(topic, [(b"k", b"v" * 100, T0 + i) for i in range(5)], **{"compression.type": "lz4"})
    return {"acks": acks, "read": t.consume(topic, 5)}


@scenario
def sc_null_and_empty_keys_values(t: Target) -> Any:
    topic = t.create(t.topic("nulls"))
    recs = [(None, None, T0), (b"", b"", T0 + 1), (None, b"", T0 + 2), (b"", None, T0 + 3), (b"k", None, T0 + 4)]
    acks = t.produce(topic, recs)
    return {"acks": acks, "read": t.consume(topic, 5)}


@scenario
def sc_headers_null_empty_duplicate(t: Target) -> Any:
    topic = t.create(t.topic("hdrs"))
    headers: list[list[tuple[str, bytes | None]]] = [
        [],
        [("a", None)],
        [("", b"")],
        [("dup", b"1"), ("dup", b"2"), ("dup", None)],
        [("bin", bytes(range(256)))],
    ]
    acks = t.produce(topic, [(b"k", b"v", T0 + i) for i in range(5)], headers=headers)
    return {"acks": acks, "read": t.consume(topic, 5)}


@scenario
def sc_timestamp_zero_and_default(t: Target) -> Any:
    """A record with no timestamp gets the producer's clock; only its type is compared."""
    topic = t.create(t.topic("ts"))
    t.produce(topic, [(None, b"a", 1), (None, b"b", T0)])
    got = t.consume(topic, 2)
    return [r["ts"] for r in got]


@scenario
def sc_record_too_large_topic_limit(t: Target) -> Any:
    topic = t.create(t.topic("big"), config={"max.message.bytes": "2000"})
    small = t.produce(topic, [(None, b"x" * 500, T0)])
    big = t.produce(topic, [(None, b"x" * 5000, T0)])
    return {"small": small, "big": [b[2] for b in big], "wm": list(t.watermarks(topic))}


def _raw_produce(t: Target, topic: str, batch: bytes, version: int = 9, acks: int = -1) -> dict[str, Any]:
    req = ProduceRequest(acks=acks, timeout_ms=10000, topic_data=[PT(name=topic, partition_data=[PP(index=0, records=batch)])])
    resp = t.raw_led(req, version, lambda r: r.responses[0].partition_responses[0].error_code)
    p = resp.responses[0].partition_responses[0]
    return {"error": error_name(p.error_code), "base_offset": p.base_offset, "log_start": p.log_start_offset}


def _batch(n: int = 3, value: bytes = b"v", **kw: Any) -> bytes:
    b = RecordBatchBuilder(**kw)
    for i in range(n):
        b.append(b"k%d" % i, value, [], timestamp_ms=T0 + i)
    return b.build()


@scenario
def sc_raw_produce_message_too_large(t: Target) -> Any:
    topic = t.create(t.topic("rbig"), config={"max.message.bytes": "1024"})
    return {
        "ok": _raw_produce(t, topic, _batch(2, b"v" * 100)),
        "too_large": _raw_produce(t, topic, _batch(1, b"v" * 4000)),
        "compressed_fits": _raw_produce(t, topic, _batch(1, b"v" * 4000, compression=Compression.GZIP)),
    }


@scenario
def sc_raw_produce_unknown_topic_partition(t: Target) -> Any:
    topic = t.create(t.topic("runk"))
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[PT(name=topic, partition_data=[PP(index=5, records=_batch())])])
    p = t.raw(req, 9).responses[0].partition_responses[0]
    return error_name(p.error_code)


@scenario
def sc_raw_produce_acks_invalid(t: Target) -> Any:
    topic = t.create(t.topic("racks"))
    return _raw_produce(t, topic, _batch(), acks=2)["error"]


# -- idempotent producer -------------------------------------------------------------


def _pid(t: Target) -> tuple[int, int]:
    for _ in range(100):  # COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE while Kafka starts its coordinators
        r = t.raw(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 4)
        if r.error_code not in (14, 15):
            break
        time.sleep(0.1)
    assert r.error_code == 0, r
    return r.producer_id, r.producer_epoch


@scenario
def sc_idem_sequence_and_duplicate(t: Target) -> Any:
    topic = t.create(t.topic("idem-dup"))
    pid, epoch = _pid(t)
    kw = {"producer_id": pid, "producer_epoch": epoch}
    return {
        "first": _raw_produce(t, topic, _batch(3, base_sequence=0, **kw)),
        "next": _raw_produce(t, topic, _batch(2, base_sequence=3, **kw)),
        "duplicate_last": _raw_produce(t, topic, _batch(2, base_sequence=3, **kw)),
        "duplicate_first": _raw_produce(t, topic, _batch(3, base_sequence=0, **kw)),
        "wm": list(t.watermarks(topic)),
    }


@scenario
def sc_idem_out_of_order(t: Target) -> Any:
    topic = t.create(t.topic("idem-ooo"))
    pid, epoch = _pid(t)
    kw = {"producer_id": pid, "producer_epoch": epoch}
    return {
        "first": _raw_produce(t, topic, _batch(3, base_sequence=0, **kw)),
        "gap": _raw_produce(t, topic, _batch(1, base_sequence=7, **kw))["error"],
        "wm": list(t.watermarks(topic)),
    }


@scenario
def sc_idem_first_sequence_not_zero(t: Target) -> Any:
    topic = t.create(t.topic("idem-nz"))
    pid, epoch = _pid(t)
    return _raw_produce(t, topic, _batch(2, producer_id=pid, producer_epoch=epoch, base_sequence=5))["error"]


@scenario
def sc_idem_fenced_epoch(t: Target) -> Any:
    topic = t.create(t.topic("idem-epoch"))
    pid, epoch = _pid(t)
    out = {
        "new_epoch": _raw_produce(t, topic, _batch(1, producer_id=pid, producer_epoch=epoch + 1, base_sequence=0))["error"],
        "old_epoch": _raw_produce(t, topic, _batch(1, producer_id=pid, producer_epoch=epoch, base_sequence=1))["error"],
    }
    return out


@scenario
def sc_idem_unknown_producer_id(t: Target) -> Any:
    topic = t.create(t.topic("idem-unk"))
    return _raw_produce(t, topic, _batch(1, producer_id=987654321, producer_epoch=0, base_sequence=0))["error"]
