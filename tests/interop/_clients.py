"""Produce/consume helpers for each real client, on one common record shape.

Every helper takes a bootstrap address and deals in :class:`Rec`; consumers
return records with their partition and offset filled in. Every wait is
bounded by a deadline on a real condition (records received, end of
partition), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tests.fixtures.tools import require_tool

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TS_BASE = 1_700_000_000_000
CONSUME_TIMEOUT = 30.0


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int | None = None  # CreateTime ms; None = "set by the client, not checked exactly"
    offset: int = -1


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_records(
    tag: str, partitions: int, per_partition: int, *, binary: bool = True
) -> list[Rec]:
    """Records exercising null keys, tombstones, empty values, binary bytes, repeated headers."""
    out: list[Rec] = []
    n = 0
    for p in range(partitions):
        for i in range(per_partition):
            n += 1
            key: bytes | None = f"k-{tag}-{p}-{i}".encode()
            value: bytes | None = f"v-{tag}-{p}-{i}-".encode() + b"x" * (i * 37 % 300)
            if binary:
                if i % 7 == 3:
                    key = None
                if i % 11 == 5:
                    value = None  # tombstone
                elif i % 11 == 6:
                    value = b""
                elif i % 5 == 2:
                    value = bytes(range(256)) + b"\n|:@@\r\x00" + value
            headers: tuple[tuple[str, bytes], ...] = (
                ("seq", str(i).encode()),
                ("src", tag.encode()),
            )
            if i % 3 == 0:
                headers += (("dup", b"first"), ("dup", b"second"), ("empty", b""))
            if binary and i % 4 == 1:
                # binary, but kcat prints %h values as C strings "k=v,k=v": no NUL, comma, = or newline
                headers += (("bin", bytes([1, 255, 127, 200, 9])),)
            out.append(Rec(p, key, value, headers, TS_BASE + n * 7))
    return out


def by_partition(recs: Iterable[Rec]) -> dict[int, list[Rec]]:
    d: dict[int, list[Rec]] = defaultdict(list)
    for r in recs:
        d[r.partition].append(r)
    return d


def assert_same(
    expected: Sequence[Rec],
    got: Sequence[Rec],
    *,
    what: str = "",
    ts_window: tuple[int, int] | None = None,
) -> None:
    """Same records per partition, in order, with contiguous offsets; byte-exact.

    Expected records with an offset (from the producer's acknowledgement) must be
    found at exactly that offset; those without a timestamp must fall in ``ts_window``.
    """
    exp = by_partition(expected)
    act = by_partition(got)
    assert sorted(act) == sorted(exp), f"{what}: partitions {sorted(act)} != {sorted(exp)}"
    for p, want in exp.items():
        have = sorted(act[p], key=lambda r: r.offset)
        assert len(have) == len(want), (
            f"{what}: partition {p}: {len(have)} records, want {len(want)}"
        )
        offsets = [r.offset for r in have]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), (
            f"{what}: partition {p}: offsets not contiguous: {offsets}"
        )
        for i, (w, h) in enumerate(zip(want, have, strict=True)):
            ctx = f"{what}: partition {p} record {i} (offset {h.offset})"
            assert h.key == w.key, f"{ctx}: key {h.key!r} != {w.key!r}"
            assert h.value == w.value, f"{ctx}: value {h.value!r:.200} != {w.value!r:.200}"
            assert tuple(h.headers) == tuple(w.headers), (
                f"{ctx}: headers {h.headers} != {w.headers}"
            )
            if w.timestamp is not None:
                assert h.timestamp == w.timestamp, (
                    f"{ctx}: timestamp {h.timestamp} != {w.timestamp}"
                )
            elif ts_window is not None:
                lo, hi = ts_window
                assert lo <= h.timestamp <= hi, (
                    f"{ctx}: timestamp {h.timestamp} outside [{lo}, {hi}]"
                )
            if w.offset >= 0:
                assert h.offset == w.offset, f"{ctx}: acknowledged at offset {w.offset}"


# -- admin ----------------------------------------------------------------------------


# Topics of these helpers keep their records: make_records stamps them in Nov 2023
# (TS_BASE), older than the default retention.ms (7 days), and floe dev's compactor
# applies retention every pass (10 s), as Kafka does every log.retention.check.interval.ms
# (5 min): a pass between the acks and the read removed them (issue 43).
TOPIC_CONFIG = {"retention.ms": "-1"}


def create_topic(bootstrap: str, name: str, partitions: int, timeout: float = 30) -> None:
    """CreateTopics through librdkafka's AdminClient (``TOPIC_CONFIG``), then wait until
    Metadata shows it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(name, partitions, 1, config=TOPIC_CONFIG)
    futures = admin.create_topics([topic], request_timeout=timeout)
    futures[name].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(name, timeout=5)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions:
            return
    raise AssertionError(f"topic {name} not visible with {partitions} partitions")


# -- confluent-kafka (librdkafka) ---------------------------------------------------------


def confluent_produce(
    bootstrap: str, topic: str, recs: Sequence[Rec], *, codec: str = "none", **conf: object
) -> list[Rec]:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": "all",
            "compression.type": codec,
            "message.timeout.ms": 30000,
            **conf,
        }
    )
    acked: list[Rec] = []
    errors: list[object] = []

    def make_cb(r: Rec):
        def cb(err, msg):
            if err is not None:
                errors.append(err)
            else:
                acked.append(replace(r, offset=msg.offset()))

        return cb

    for r in recs:
        kw: dict[str, object] = {"partition": r.partition, "on_delivery": make_cb(r)}
        if r.timestamp is not None:
            kw["timestamp"] = r.timestamp
        if r.headers:
            kw["headers"] = list(r.headers)
        p.produce(topic, r.value, r.key, **kw)
        p.poll(0)
    left = p.flush(60)
    assert left == 0, f"confluent producer: {left} messages not delivered"
    assert not errors, f"confluent producer errors: {errors[:5]}"
    return acked


def confluent_consume(
    bootstrap: str,
    topic: str,
    counts: dict[int, int],
    timeout: float = CONSUME_TIMEOUT,
    **conf: object,
) -> list[Rec]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"interop-{uuid.uuid4().hex[:8]}",  # never joined: assign() only
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            **conf,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in counts])
        got: list[Rec] = []
        need = sum(counts.values())
        deadline = time.monotonic() + timeout
        while len(got) < need and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise AssertionError(f"confluent consumer error: {err}")
                got.append(
                    Rec(
                        m.partition(),
                        m.key(),
                        m.value(),
                        tuple((k, v) for k, v in (m.headers() or [])),
                        m.timestamp()[1],
                        m.offset(),
                    )
                )
        return got
    finally:
        c.close()


# -- aiokafka -----------------------------------------------------------------------------


def _recs(partition: int, msgs: Iterable[Any]) -> list[Rec]:
    """Records of consumed aiokafka / kafka-python messages (same attributes in both)."""
    return [
        Rec(partition, m.key, m.value, tuple(m.headers or ()), m.timestamp, m.offset) for m in msgs
    ]


async def _aiokafka_produce(
    bootstrap: str, topic: str, recs: Sequence[Rec], codec: str, **kw: object
) -> list[Rec]:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        compression_type=None if codec == "none" else codec,
        linger_ms=5,
        request_timeout_ms=30000,
        **kw,
    )
    await p.start()
    try:
        futs = []
        for r in recs:
            futs.append(
                await p.send(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                    headers=list(r.headers) or None,
                )
            )
        metas = await asyncio.wait_for(asyncio.gather(*futs), 60)
        return [replace(r, offset=m.offset) for r, m in zip(recs, metas, strict=True)]
    finally:
        await p.stop()


def aiokafka_produce(
    bootstrap: str, topic: str, recs: Sequence[Rec], *, codec: str = "none", **kw: object
) -> list[Rec]:
    return asyncio.run(_aiokafka_produce(bootstrap, topic, recs, codec, **kw))


async def _aiokafka_consume(
    bootstrap: str, topic: str, counts: dict[int, int], wait_s: float
) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in counts]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        got: list[Rec] = []
        need = sum(counts.values())
        deadline = time.monotonic() + wait_s
        while len(got) < need and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=500)
            for tp, msgs in batch.items():
                got.extend(_recs(tp.partition, msgs))
        return got
    finally:
        await c.stop()


def aiokafka_consume(
    bootstrap: str, topic: str, counts: dict[int, int], timeout: float = CONSUME_TIMEOUT
) -> list[Rec]:
    return asyncio.run(_aiokafka_consume(bootstrap, topic, counts, timeout))


# -- kafka-python -----------------------------------------------------------------------


def kafka_python_produce(
    bootstrap: str, topic: str, recs: Sequence[Rec], *, codec: str = "none", **kw: object
) -> list[Rec]:
    from kafka import KafkaProducer

    conf: dict[str, object] = {"bootstrap_servers": bootstrap}  # DEFAULT settings otherwise
    if codec != "none":
        conf["compression_type"] = codec
    conf.update(kw)
    p = KafkaProducer(**conf)
    try:
        futs = [
            p.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers),
            )
            for r in recs
        ]
        p.flush(60)
        return [
            replace(r, offset=f.get(timeout=30).offset) for r, f in zip(recs, futs, strict=True)
        ]
    finally:
        p.close(10)


def kafka_python_consume(
    bootstrap: str, topic: str, counts: dict[int, int], timeout: float = CONSUME_TIMEOUT
) -> list[Rec]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        tps = [TopicPartition(topic, p) for p in counts]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got: list[Rec] = []
        need = sum(counts.values())
        deadline = time.monotonic() + timeout
        while len(got) < need and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=500).items():
                got.extend(_recs(tp.partition, msgs))
        return got
    finally:
        c.close()


# -- kcat (Debian, librdkafka 2.0) -------------------------------------------------------


def kcat_produce(
    bootstrap: str,
    topic: str,
    partition: int,
    lines: Sequence[tuple[str, str]],
    *,
    codec: str = "none",
    headers: Sequence[tuple[str, str]] = (),
    timeout: float = 60,
) -> list[Rec]:
    """``kcat -P -K:`` one ``key:value`` line per record; the same headers on each record.

    kcat sets no explicit timestamp (librdkafka uses the current time), so the
    returned records have ``timestamp=None``.
    """
    cmd = [require_tool("kcat"), "-P", "-b", bootstrap, "-t", topic, "-p", str(partition), "-K:", "-X", "acks=all"]
    if codec != "none":
        cmd += ["-z", codec]
    for k, v in headers:
        cmd += ["-H", f"{k}={v}"]
    data = "".join(f"{k}:{v}\n" for k, v in lines).encode()
    res = subprocess.run(cmd, input=data, capture_output=True, timeout=timeout)
    assert res.returncode == 0, (
        f"kcat -P failed ({res.returncode}): {res.stderr.decode(errors='replace')}"
    )
    hdrs = tuple((k, v.encode()) for k, v in headers)
    return [Rec(partition, k.encode(), v.encode(), hdrs, None) for k, v in lines]


KCAT_FORMAT = "@@%p|%o|%T|%K|%S|%h\n%k%s"


def kcat_consume(
    bootstrap: str, topic: str, timeout: float = 60, partition: int | None = None
) -> list[Rec]:
    """``kcat -C -o beginning -e`` of every partition (or one), parsed binary-safe via %K/%S lengths."""
    cmd = [
        require_tool("kcat"),
        "-C",
        "-b",
        bootstrap,
        "-t",
        topic,
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        KCAT_FORMAT,
    ]
    if partition is not None:
        cmd += ["-p", str(partition)]
    res = subprocess.run(cmd, capture_output=True, timeout=timeout)
    assert res.returncode == 0, (
        f"kcat -C failed ({res.returncode}): {res.stderr.decode(errors='replace')}"
    )
    return parse_kcat(res.stdout)


def _kcat_headers(s: bytes) -> tuple[tuple[str, bytes], ...]:
    if not s:
        return ()
    out = []
    for item in s.split(b","):
        k, _, v = item.partition(b"=")
        out.append((k.decode(), v))
    return tuple(out)


def parse_kcat(out: bytes) -> list[Rec]:
    recs: list[Rec] = []
    pos = 0
    while pos < len(out):
        assert out.startswith(b"@@", pos), (
            f"kcat output out of sync at {pos}: {out[pos : pos + 80]!r}"
        )
        nl = out.index(b"\n", pos)
        p, o, ts, klen, vlen, hdr = out[pos + 2 : nl].split(b"|", 5)
        pos = nl + 1
        kl, vl = int(klen), int(vlen)
        key = out[pos : pos + kl] if kl >= 0 else None
        pos += max(kl, 0)
        value = out[pos : pos + vl] if vl >= 0 else None
        pos += max(vl, 0)
        recs.append(Rec(int(p), key, value, _kcat_headers(hdr), int(ts), int(o)))
    return recs
