"""The KIP-848 consumer groups as ``floe groups list|describe`` shows them.

Read straight from the metastore (no agent needed): a group's epochs and
assignor, each member's epoch, subscription, current and target assignment (topic
names), and the committed offsets with their lag behind the high watermark.
``floe_cli.groups`` prints these beside the classic and share groups.
"""

from __future__ import annotations

import uuid
from typing import Any


def _state(rec: Any) -> str:
    if not rec.members:
        return "Empty"
    if rec.group_epoch > rec.assignment_epoch:
        return "Assigning"
    if any(m.member_epoch != rec.assignment_epoch or m.state != "stable" for m in rec.members):
        return "Reconciling"
    return "Stable"


async def offsets_with_lag(meta: Any, group_id: str) -> list[dict[str, Any]]:
    rows = []
    ends: dict[uuid.UUID, dict[int, int]] = {}
    for o in await meta.fetch_offsets(group_id):
        info = await meta.get_topic(o.topic_id)
        if o.topic_id not in ends:
            ends[o.topic_id] = {p.partition: p.high_watermark for p in await meta.partition_offsets(o.topic_id)}
        end = ends[o.topic_id].get(o.partition, o.offset)
        rows.append({
            "topic": info.name if info else str(o.topic_id), "partition": o.partition,
            "committed_offset": o.offset, "high_watermark": end, "lag": max(0, end - o.offset),
        })  # fmt: skip
    return rows


async def list_rows(meta: Any) -> list[str]:
    """One tab-separated line per consumer group: id, type, state, epoch, members, lag."""
    out = []
    for listed in await meta.list_consumer_groups():
        rec = await meta.load_consumer_group(listed.group_id)
        if rec is None:
            continue
        lag = sum(r["lag"] for r in await offsets_with_lag(meta, rec.group_id))
        out.append(
            f"{rec.group_id}\tconsumer\t{_state(rec)}\tepoch={rec.group_epoch}\tmembers={len(rec.members)}\tlag={lag}"
        )
    return out


async def describe(meta: Any, group_id: str) -> dict[str, Any] | None:
    rec = await meta.load_consumer_group(group_id)
    if rec is None:
        return None
    names: dict[uuid.UUID, str] = {}

    async def named(a: dict[uuid.UUID, list[int]]) -> dict[str, list[int]]:
        out = {}
        for tid, ps in a.items():
            if tid not in names:
                info = await meta.get_topic(tid)
                names[tid] = info.name if info else str(tid)
            out[names[tid]] = sorted(ps)
        return dict(sorted(out.items()))

    members = []
    for m in rec.members:
        members.append({
            "member_id": m.member_id, "instance_id": m.instance_id, "member_epoch": m.member_epoch,
            "state": m.state, "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": m.subscribed_topic_names, "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": await named(m.assigned), "revoking": await named(m.pending_revocation),
            "target_assignment": await named(m.target),
        })  # fmt: skip
    return {
        "group": rec.group_id, "type": "consumer", "state": _state(rec), "group_epoch": rec.group_epoch,
        "assignment_epoch": rec.assignment_epoch, "assignor": rec.assignor or "uniform",
        "coordinator_agent": rec.coordinator_agent, "members": members,
        "offsets": await offsets_with_lag(meta, group_id),
    }  # fmt: skip
