"""What `floe groups` shows of a KIP-848 consumer group (floe_cli.consumer_groups):
type, state, epochs, members with their assignments by topic name, and lag."""

from __future__ import annotations

import uuid
from pathlib import Path

from floe_cli.consumer_groups import describe, list_rows
from metastore import open_metastore
from metastore.types import ConsumerGroupRecord, ConsumerMemberRecord, GroupOffset
from tests.metastore.helpers import batch


async def test_list_and_describe_consumer_group(tmp_path: Path) -> None:
    meta = await open_metastore(f"sqlite:///{tmp_path / 'meta.db'}")
    try:
        topic = (await meta.create_topic("orders", 2)).topic
        assert topic is not None
        await meta.commit_object(f"obj/{uuid.uuid4()}", 100, "a", [batch(topic.id, 0, 10), batch(topic.id, 1, 4)])
        await meta.commit_offsets("cg", [GroupOffset(topic.id, 0, 7, -1, "", 1, None), GroupOffset(topic.id, 1, 4, -1, "", 1, None)])
        member = ConsumerMemberRecord(
            "m1", None, None, "c1", "/127.0.0.1", 5, 4, "stable", 300_000, None, ["orders"], None,
            {topic.id: [0, 1]}, {}, {topic.id: [0, 1]},
        )  # fmt: skip
        await meta.save_consumer_group(ConsumerGroupRecord("cg", 5, 5, "uniform", {"orders": 2}, [member], "agent-1"))
        assert await list_rows(meta) == ["cg\tconsumer\tStable\tepoch=5\tmembers=1\tlag=3"]
        d = await describe(meta, "cg")
        assert d is not None
        assert (d["type"], d["state"], d["group_epoch"], d["assignor"]) == ("consumer", "Stable", 5, "uniform")
        assert d["members"][0]["assignment"] == {"orders": [0, 1]} and d["members"][0]["member_epoch"] == 5
        assert [(o["partition"], o["lag"]) for o in d["offsets"]] == [(0, 3), (1, 0)]
        assert await describe(meta, "nope") is None
    finally:
        await meta.close()
