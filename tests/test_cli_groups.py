"""`floe groups list|describe` on a metastore with a classic and a share group."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from floe_cli.main import main
from metastore import open_metastore
from metastore.types import GroupOffset, InflightRange, SharePartitionState


async def _seed(url: str) -> None:
    meta = await open_metastore(url)
    try:
        t = (await meta.create_topic("gt", 2)).topic
        assert t is not None
        await meta.commit_offsets("classic-g", [GroupOffset(t.id, 0, 0)])
        await meta.share_group_save("share-g", 3)
        st = SharePartitionState(
            "share-g", t.id, 1, 0, 6,
            [InflightRange(0, 1, 1, 1, 99, "m"), InflightRange(2, 3, 0, 1), InflightRange(4, 5, 4, 5)],
        )  # fmt: skip
        assert await meta.share_partition_cas(st, 0)
    finally:
        await meta.close()


def test_groups_list_and_describe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    asyncio.run(_seed(url))
    assert main(["groups", "--metastore", url, "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "classic-g\tclassic\tEmpty" in lines
    assert "share-g\tshare\tin-flight=4\tarchived=2\tpartitions=1" in lines
    assert main(["groups", "--metastore", url, "describe", "share-g"]) == 0
    [p] = json.loads(capsys.readouterr().out)["partitions"]
    assert (p["topic"], p["partition"], p["acquired"], p["available"], p["archived"]) == ("gt", 1, 2, 2, 2)
    assert main(["groups", "--metastore", url, "describe", "classic-g"]) == 0
    assert json.loads(capsys.readouterr().out)["offsets"][0]["lag"] == 0
    assert main(["groups", "--metastore", url, "describe", "nope"]) == 1
