"""The Jepsen-style queue checker (loadtest/queue_check.py): its check on hand-made
histories, and a short run with an agent killed on Postgres + moto (nothing
acknowledged may be lost; duplicates are reported, not asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadtest.queue_check import check, main


def test_check_finds_lost_duplicated_reordered_and_unexpected() -> None:
    status = {"p0.1:0": "acked", "p0.1:1": "acked", "p0.1:2": "acked", "p0.1:3": "failed",
              "p0.1:4": "unknown", "p1.1:0": "acked"}
    reads = [(0, 0, "p0.1:0"), (0, 1, "p0.1:2"), (0, 2, "p0.1:1"),  # 1 after 2: reordered
             (0, 3, "p0.1:2"),  # a second copy of 2: duplicated, not reordered again
             (0, 4, "p0.1:3"),  # failed but written: indeterminate, fine
             (1, 0, "p9.1:7")]  # never sent
    r = check(status, reads)
    assert (r["acked"], r["failed"], r["unknown"]) == (4, 1, 1)
    assert r["_details"]["lost"] == ["p1.1:0"]
    assert r["_details"]["duplicated"] == {"p0.1:2": 2}
    assert [x["value"] for x in r["_details"]["reordered"]] == ["p0.1:1"]
    assert r["_details"]["unexpected"] == ["p9.1:7"]
    assert (r["lost"], r["duplicated"], r["reordered"], r["unexpected"]) == (1, 1, 1, 1)
    assert (r["failed_but_read"], r["unknown_but_read"], r["duplicated_acked"]) == (1, 0, 1)


def test_check_same_sequence_on_other_partitions_is_not_reordered() -> None:
    status = {"p0.1:0": "acked", "p0.1:1": "acked", "p0.1:2": "acked"}
    reads = [(1, 0, "p0.1:1"), (0, 0, "p0.1:0"), (0, 1, "p0.1:2")]
    r = check(status, reads)
    assert (r["lost"], r["duplicated"], r["reordered"], r["unexpected"]) == (0, 0, 0, 0)


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.s3
@pytest.mark.timeout(300)
def test_short_run_with_an_agent_killed_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    s = main(["--nemesis", "kill", "--duration", "12", "--kill-every", "4", "--kill-pause", "2",
              "--agents", "2", "--rate", "200", "--recovery", "2", "--out", str(out)])
    assert s["read_complete"]
    assert s["acked"] > 1000
    assert s["lost"] == 0, json.loads((out / "details.json").read_text())["lost"][:20]
    assert s["unexpected"] == 0
    assert isinstance(s["duplicated"], int) and isinstance(s["reordered"], int)  # reported
    kills = [e for e in s["nemesis_events"] if e["action"] == "sigkill"]
    assert kills and all(n >= 2 for n in s["agent_starts"][: len(kills)])
    assert json.loads((out / "summary.json").read_text())["acked"] == s["acked"]
