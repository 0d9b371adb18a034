"""The KRaft cluster id the Kafka 4.1 fixture formats storage with: never one that
``kafka-storage format -t`` reads as an option (a CI run failed on an id starting
with ``-``)."""

from __future__ import annotations

import uuid

import pytest

from loadtest import kafka_broker


def test_cluster_id_never_starts_with_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    dash_first = uuid.UUID(bytes=b"\xf8" + bytes(15))  # base64 "-AAA..."
    plain = uuid.UUID(bytes=b"\x10" + bytes(15))
    ids = iter([dash_first, plain])
    monkeypatch.setattr(kafka_broker.uuid, "uuid4", lambda: next(ids))
    cid = kafka_broker._cluster_id()
    assert not cid.startswith("-")
    assert len(cid) == 22
