"""Round trips through the REAL agent process with every client, every codec, both back ends.

Each test produces with one client (all five compression settings, three
partitions) and consumes everything back with all four consumers
(confluent-kafka, aiokafka, kafka-python, kcat), so the full producer x
consumer matrix runs on SQLite+file and on Postgres+S3(moto). Keys, values
(including null keys, tombstones, empty and binary values), headers (repeated
keys, empty and binary values) and CreateTime timestamps must come back
byte-exact at the acknowledged offsets.
"""

from __future__ import annotations

import time

import pytest

from tests.interop._clients import (
    CODECS,
    Rec,
    aiokafka_consume,
    aiokafka_produce,
    assert_same,
    by_partition,
    confluent_consume,
    confluent_produce,
    create_topic,
    kafka_python_consume,
    kafka_python_produce,
    kcat_consume,
    kcat_produce,
    make_records,
    unique_topic,
)

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

PARTITIONS = 3
PER_PARTITION = 6


def _produce_confluent(bootstrap: str, topic: str) -> list[Rec]:
    out: list[Rec] = []
    for codec in CODECS:
        extra = {"enable.idempotence": True} if codec in ("zstd", "none") else {}
        out += confluent_produce(
            bootstrap,
            topic,
            make_records(f"cf-{codec}", PARTITIONS, PER_PARTITION),
            codec=codec,
            **extra,
        )
    return out


def _produce_aiokafka(bootstrap: str, topic: str) -> list[Rec]:
    out: list[Rec] = []
    for codec in CODECS:
        extra = {"enable_idempotence": True} if codec in ("lz4", "none") else {}
        out += aiokafka_produce(
            bootstrap,
            topic,
            make_records(f"aio-{codec}", PARTITIONS, PER_PARTITION),
            codec=codec,
            **extra,
        )
    return out


def _produce_kafka_python(bootstrap: str, topic: str) -> list[Rec]:
    out: list[Rec] = []
    for codec in CODECS:  # default settings: idempotence on (InitProducerId), acks=all
        out += kafka_python_produce(
            bootstrap, topic, make_records(f"kp-{codec}", PARTITIONS, PER_PARTITION), codec=codec
        )
    return out


def _produce_kcat(bootstrap: str, topic: str) -> list[Rec]:
    out: list[Rec] = []
    for codec in CODECS:
        for p in range(PARTITIONS):
            lines = [
                (f"k-{codec}-{p}-{i}", f"v-{codec}-{p}-{i}-" + "y" * (i * 53 % 400))
                for i in range(PER_PARTITION)
            ]
            out += kcat_produce(
                bootstrap,
                topic,
                p,
                lines,
                codec=codec,
                headers=[("src", f"kcat-{codec}"), ("p", str(p)), ("e", "")],
            )
    return out


PRODUCERS = {
    "confluent": _produce_confluent,
    "aiokafka": _produce_aiokafka,
    "kafka-python": _produce_kafka_python,
    "kcat": _produce_kcat,
}


def _consumers(bootstrap: str, topic: str, counts: dict[int, int]) -> dict[str, object]:
    return {
        "confluent": lambda: confluent_consume(bootstrap, topic, counts),
        "aiokafka": lambda: aiokafka_consume(bootstrap, topic, counts),
        "kafka-python": lambda: kafka_python_consume(bootstrap, topic, counts),
        "kcat": lambda: kcat_consume(bootstrap, topic),
    }


@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_roundtrip_matrix(shared_agent, producer: str) -> None:
    bootstrap = shared_agent.bootstrap
    topic = unique_topic(f"rt-{producer}")
    create_topic(bootstrap, topic, PARTITIONS)
    t0 = int(time.time() * 1000) - 1000
    expected = PRODUCERS[producer](bootstrap, topic)
    t1 = int(time.time() * 1000) + 1000
    assert len(expected) == len(CODECS) * PARTITIONS * PER_PARTITION
    counts = {p: len(rs) for p, rs in by_partition(expected).items()}

    failures: dict[str, str] = {}
    for name, consume in _consumers(bootstrap, topic, counts).items():
        try:
            got = consume()  # type: ignore[operator]
            assert_same(
                expected,
                got,
                what=f"{producer} -> {name} on {shared_agent.backend}",
                ts_window=(t0, t1),
            )
        except AssertionError as e:
            failures[name] = str(e)[:2000]
    assert not failures, "\n\n".join(f"[{k}] {v}" for k, v in failures.items())
