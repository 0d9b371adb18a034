"""OffsetCommit/OffsetFetch scenarios: simple (standalone) commits, negative
offsets, metadata size, unknown topic/partition, uncommitted partitions,
unknown groups, commits against an active group (generation, member).
"""

from __future__ import annotations

import time
from typing import Any

from kafka_protocol.messages import (
    FindCoordinatorRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
)
from tests.conformance._harness import Target, error_name, scenario
from tests.conformance.sc_groups import joined

CT = OffsetCommitRequest.OffsetCommitRequestTopic
CP = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
FT = OffsetFetchRequest.OffsetFetchRequestTopic
# What a client retries after a FindCoordinator: Kafka creates __consumer_offsets on
# the first FindCoordinator, not on an OffsetCommit/OffsetFetch, and answers those
# NOT_COORDINATOR until then (a scenario run alone, before any group scenario, got
# NOT_COORDINATOR and an empty OffsetFetch answer from Kafka).
TRANSIENT = {"COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR"}


def _settled(t: Target, req: Any, version: int, errors: Any) -> Any:
    """The response once no coordinator-start error is in it: as a client does, find the
    coordinator and ask again (bounded)."""
    for _ in range(150):
        r = t.raw(req, version)
        if not set(errors(r)) & TRANSIENT:
            return r
        t.raw(FindCoordinatorRequest(key=req.group_id, key_type=0), 3)
        time.sleep(0.1)  # bounded poll: the coordinator finishes loading
    return r


def commit(t: Target, group: str, topic: str, parts: dict[int, tuple[int, str | None]], gen: int = -1, member: str = "", version: int = 8) -> dict[str, str]:
    req = OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=gen, member_id=member,
        topics=[CT(name=topic, partitions=[CP(partition_index=p, committed_offset=o, committed_metadata=m) for p, (o, m) in parts.items()])],
    )
    r = _settled(t, req, version, lambda r: [error_name(p.error_code) for tp in r.topics for p in tp.partitions])
    return {str(p.partition_index): error_name(p.error_code) for tp in r.topics for p in tp.partitions}


def fetch(t: Target, group: str, topic: str | None, parts: list[int], version: int = 7) -> Any:
    req = OffsetFetchRequest(group_id=group, topics=None if topic is None else [FT(name=topic, partition_indexes=parts)])
    r = _settled(t, req, version, lambda r: [error_name(r.error_code)] + [error_name(p.error_code) for tp in r.topics for p in tp.partitions])
    return {
        "error": error_name(r.error_code),
        "partitions": {
            f"{tp.name == topic}:{p.partition_index}": [p.committed_offset, p.metadata, error_name(p.error_code)]
            for tp in r.topics
            for p in tp.partitions
        },
    }


@scenario
def sc_offsets_simple_commit_fetch(t: Target) -> Any:
    topic = t.create(t.topic("oc"), 2)
    g = t.group("oc")
    return {
        "commit": commit(t, g, topic, {0: (5, "meta"), 1: (0, None)}),
        "fetch": fetch(t, g, topic, [0, 1]),
        "fetch_all": fetch(t, g, None, []),
    }


@scenario
def sc_offsets_negative_and_beyond(t: Target) -> Any:
    topic = t.create(t.topic("oc-neg"))
    g = t.group("oc-neg")
    out = {"minus1": commit(t, g, topic, {0: (-1, "")})}
    out["after_minus1"] = fetch(t, g, topic, [0])
    out["minus5"] = commit(t, g, topic, {0: (-5, "")})
    out["beyond_hw"] = commit(t, g, topic, {0: (1000, "")})
    out["after"] = fetch(t, g, topic, [0])
    return out


@scenario
def sc_offsets_metadata_size(t: Target) -> Any:
    topic = t.create(t.topic("oc-md"))
    g = t.group("oc-md")
    return {
        "4096": commit(t, g, topic, {0: (1, "m" * 4096)}),
        "4097": commit(t, g, topic, {0: (2, "m" * 4097)}),
        "after": fetch(t, g, topic, [0])["partitions"]["True:0"][0],
    }


@scenario
def sc_offsets_unknown_topic_partition(t: Target) -> Any:
    topic = t.create(t.topic("oc-unk"))
    g = t.group("oc-unk")
    return {
        "unknown_topic": commit(t, g, t.topic("oc-nosuch"), {0: (1, "")}),
        "unknown_partition": commit(t, g, topic, {4: (1, "")}),
        "fetch_unknown_partition": fetch(t, g, topic, [4]),
    }


@scenario
def sc_offsets_fetch_uncommitted_and_unknown_group(t: Target) -> Any:
    topic = t.create(t.topic("oc-none"), 2)
    g = t.group("oc-none")
    commit(t, g, topic, {0: (3, "")})
    return {"uncommitted": fetch(t, g, topic, [1]), "unknown_group": fetch(t, t.group("oc-ghost"), topic, [0])}


@scenario
def sc_offsets_commit_against_active_group(t: Target) -> Any:
    topic = t.create(t.topic("oc-act"))
    g = t.group("oc-act")
    m, gen = joined(t, g)
    return {
        "ok": commit(t, g, topic, {0: (1, "")}, gen, m),
        "bad_generation": commit(t, g, topic, {0: (2, "")}, gen + 3, m),
        "unknown_member": commit(t, g, topic, {0: (2, "")}, gen, "nobody"),
        "simple_on_active": commit(t, g, topic, {0: (2, "")}),
        "committed": fetch(t, g, topic, [0])["partitions"],
    }


@scenario
def sc_offsets_commit_generation_on_unknown_group(t: Target) -> Any:
    topic = t.create(t.topic("oc-gen"))
    return commit(t, t.group("oc-gen"), topic, {0: (1, "")}, 4, "someone")


@scenario
def sc_offsets_versions(t: Target) -> Any:
    topic = t.create(t.topic("oc-ver"))
    g = t.group("oc-ver")
    out = {}
    for v in (2, 5, 8):
        out[f"commit{v}"] = commit(t, g, topic, {0: (v, "x")}, version=v)
    for v in (1, 5, 7):
        out[f"fetch{v}"] = fetch(t, g, topic, [0], version=v)
    return out


@scenario
def sc_offset_delete(t: Target) -> Any:
    topic = t.create(t.topic("od"))
    g = t.group("od")
    commit(t, g, topic, {0: (4, "")})
    T = OffsetDeleteRequest.OffsetDeleteRequestTopic
    P = OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition
    r = t.raw(OffsetDeleteRequest(group_id=g, topics=[T(name=topic, partitions=[P(partition_index=0)])]), 0)
    ghost = t.raw(OffsetDeleteRequest(group_id=t.group("od-ghost"), topics=[T(name=topic, partitions=[P(partition_index=0)])]), 0)
    return {
        "error": error_name(r.error_code),
        "partitions": [error_name(p.error_code) for tp in r.topics for p in tp.partitions],
        "after": fetch(t, g, topic, [0])["partitions"],
        "unknown_group": error_name(ghost.error_code),
    }
