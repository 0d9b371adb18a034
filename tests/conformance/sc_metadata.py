"""Metadata and ApiVersions scenarios: unknown topics with and without auto
creation, invalid names, the shape of a topic's partitions, auto-creation by a
producer, the ApiVersions table and what each advertised version answers.
"""

from __future__ import annotations

import time
from typing import Any

from kafka_protocol.messages import ApiVersionsRequest, MetadataRequest
from tests.conformance._harness import T0, Target, error_name, scenario

MT = MetadataRequest.MetadataRequestTopic


def metadata(t: Target, names: list[str] | None, auto: bool = False, version: int = 12) -> list[dict[str, Any]]:
    req = MetadataRequest(topics=None if names is None else [MT(name=n) for n in names], allow_auto_topic_creation=auto)
    r = t.raw(req, version)
    out = []
    for tp in r.topics:
        if names is not None and tp.name not in names:
            continue
        out.append(
            {
                "name_matches": tp.name in (names or []),
                "error": error_name(tp.error_code),
                "internal": tp.is_internal,
                "has_id": tp.topic_id.int != 0,
                "partitions": [
                    {
                        "index": p.partition_index,
                        "error": error_name(p.error_code),
                        "has_leader": p.leader_id >= 0,
                        "leader_epoch_known": p.leader_epoch >= 0,
                        "replicas": len(p.replica_nodes),
                        "isr": len(p.isr_nodes),
                        "offline": len(p.offline_replicas),
                    }
                    for p in sorted(tp.partitions, key=lambda p: p.partition_index)
                ],
            }
        )
    return out


@scenario
def sc_metadata_topic_shape(t: Target) -> Any:
    topic = t.create(t.topic("md"), 3)
    return {str(v): metadata(t, [topic], version=v) for v in (1, 9, 12)}


@scenario
def sc_metadata_unknown_no_autocreate(t: Target) -> Any:
    return metadata(t, [t.topic("md-unk")], auto=False)


@scenario
def sc_metadata_auto_create(t: Target) -> Any:
    name = t.topic("md-auto")
    first = metadata(t, [name], auto=True)
    deadline = time.monotonic() + 30
    while True:
        later = metadata(t, [name], auto=False)
        if later and later[0]["error"] == "NONE" and later[0]["partitions"] and later[0]["partitions"][0]["has_leader"]:
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return {"first_error": first[0]["error"] if first else None, "later": later}


@scenario
def sc_metadata_invalid_name(t: Target) -> Any:
    return {
        "no_auto": [m["error"] for m in metadata(t, ["bad name!"], auto=False)],
        "auto": [m["error"] for m in metadata(t, ["bad name!"], auto=True)],
    }


@scenario
def sc_metadata_all_topics(t: Target) -> Any:
    topic = t.create(t.topic("md-all"), 2)
    r = t.raw(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
    mine = [tp for tp in r.topics if tp.name == topic]
    return {"listed": len(mine), "partitions": len(mine[0].partitions) if mine else 0, "brokers": len(r.brokers) > 0,
            "cluster_id": r.cluster_id is not None, "controller_known": r.controller_id >= 0}


@scenario
def sc_metadata_empty_topic_list(t: Target) -> Any:
    r = t.raw(MetadataRequest(topics=[], allow_auto_topic_creation=False), 12)
    return {"topics": len(r.topics), "brokers": len(r.brokers) > 0}


@scenario
def sc_produce_auto_creates_topic(t: Target) -> Any:
    name = t.topic("md-pauto")
    acks = t.produce(name, [(None, b"v", T0)])
    md = t.admin.list_topics(name, timeout=10).topics[name]
    return {"acks": acks, "partitions": len(md.partitions)}


def _api_versions(t: Target, version: int = 3) -> Any:
    return t.raw(ApiVersionsRequest(client_software_name="floe-conformance", client_software_version="1"), version)


@scenario
def sc_api_versions_error_code(t: Target) -> Any:
    r = _api_versions(t)
    return {"error": error_name(r.error_code), "has_keys": len(r.api_keys) > 0, "v0_error": error_name(_api_versions(t, 0).error_code)}


@scenario
def sc_api_versions_table(t: Target) -> Any:
    """Per API both brokers implement, the advertised [min, max] (APIs only one side has are listed apart)."""
    r = _api_versions(t)
    return {str(k.api_key): [k.min_version, k.max_version] for k in sorted(r.api_keys, key=lambda k: k.api_key)}
