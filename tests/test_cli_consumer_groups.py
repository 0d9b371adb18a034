"""What `floe groups` shows of a KIP-848 consumer group (floe_cli.consumer_groups):
type, state, epochs, members with their assignments by topic name, and lag."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from floe_cli.consumer_groups import describe, list_rows
from floe_cli.main import main
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


def test_floe_groups_shows_consumer_groups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"

    async def seed() -> None:
        meta = await open_metastore(url)
        try:
            t = (await meta.create_topic("t", 1)).topic
            assert t is not None
            await meta.commit_offsets("classic-g", [GroupOffset(t.id, 0, 0)])
            await meta.commit_offsets("kip848-g", [GroupOffset(t.id, 0, 0)])  # also leaves a classic row
            m = ConsumerMemberRecord("m", None, None, "c", "/h", 2, 1, "stable", 1000, None, ["t"], None,
                                     {t.id: [0]}, {}, {t.id: [0]})  # fmt: skip
            await meta.save_consumer_group(ConsumerGroupRecord("kip848-g", 2, 2, "range", {"t": 1}, [m]))
        finally:
            await meta.close()

    asyncio.run(seed())
    assert main(["groups", "--metastore", url, "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "classic-g\tclassic\tEmpty" in lines
    assert "kip848-g\tconsumer\tStable\tepoch=2\tmembers=1\tlag=0" in lines
    assert not any(ln.startswith("kip848-g\tclassic") for ln in lines)
    assert main(["groups", "--metastore", url, "describe", "kip848-g"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["type"], d["assignor"], d["members"][0]["assignment"]) == ("consumer", "range", {"t": [0]})
