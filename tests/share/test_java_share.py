"""Java 4.2 ``KafkaShareConsumer`` against one agent (KIP-932 share groups).

* four share consumers on a two-partition topic all receive records, each record
  once (implicit acknowledgement);
* explicit acknowledgement: accepted and rejected records are never delivered
  again; a record released every time is delivered ``share.delivery.count.limit``
  times (delivery counts 1..limit) and then archived;
* a consumer killed with SIGKILL while holding records: another consumer gets
  them (delivery count 2) within the lock duration + 1 s of the kill.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from kafka_protocol import messages as M
from tests.interop._raw import RawConn
from tests.share import java_share as js

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    return js.build(tmp_path_factory.mktemp("java-share"))


def _wait_members(port: int, group: str, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with RawConn(port) as c:
            g = c.request(M.ShareGroupDescribeRequest(group_ids=[group]), M.ShareGroupDescribeResponse, 1).groups[0]
        if len(g.members) == n:
            return
        time.sleep(0.1)  # bounded poll on a real condition
    raise AssertionError(f"{group} never had {n} members")


@pytest.fixture
def reap() -> Iterator[Callable[[subprocess.Popen[str]], subprocess.Popen[str]]]:
    """Track started consumer processes; any still running when the test ends is killed."""
    started: list[subprocess.Popen[str]] = []

    def track(p: subprocess.Popen[str]) -> subprocess.Popen[str]:
        started.append(p)
        return p

    yield track
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def _finish(procs: list, timeout: float = 90) -> list[str]:
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, out + err[-4000:]
        outs.append(out)
    return outs


def test_four_share_consumers_on_two_partitions(floe_agent, java, reap) -> None:
    j, cp = java
    bs = floe_agent.bootstrap
    js.run(j, cp, "setup", bs, "four", "2", "g4", "share.auto.offset.reset=earliest")
    consumers = [reap(js.start(j, cp, "consume", bs, "four", "g4", "implicit", "5", "4000", "60000")) for _ in range(4)]
    js.run(j, cp, "produce", bs, "four", "400", "v", "20")
    outs = _finish(consumers)
    per = [js.records(o) for o in outs]
    assert all(per), [len(r) for r in per]  # every consumer got records
    values = [r[4] for rs in per for r in rs]
    assert sorted(values) == sorted(f"v-{i}" for i in range(400))  # each exactly once
    assert {r[1] for rs in per for r in rs} == {0, 1}


def test_explicit_accept_reject_release_until_archived(floe_agent, java) -> None:
    j, cp = java
    bs = floe_agent.bootstrap
    js.run(
        j, cp, "setup", bs, "acks", "1", "gx", "share.auto.offset.reset=earliest",
        "share.delivery.count.limit=3", "share.record.lock.duration.ms=2000",
    )  # fmt: skip
    js.run(j, cp, "produce", bs, "acks", "4", "ok")
    js.run(j, cp, "produce", bs, "acks", "3", "rej")
    js.run(j, cp, "produce", bs, "acks", "2", "rel")
    js.run(j, cp, "produce", bs, "acks", "3", "ok2")
    [out] = _finish([js.start(j, cp, "consume", bs, "acks", "gx", "explicit", "100", "3000", "60000")])
    recs = js.records(out)
    seen: dict[str, list[int]] = {}
    for _, _, _, dc, value in recs:
        seen.setdefault(value, []).append(dc)
    for v in [f"ok-{i}" for i in range(4)] + [f"ok2-{i}" for i in range(3)] + [f"rej-{i}" for i in range(3)]:
        assert seen[v] == [1], (v, seen)  # accepted / rejected: never delivered again
    for v in ("rel-0", "rel-1"):
        assert seen[v] == [1, 2, 3], (v, seen)  # released each time: archived at the limit
    assert len(recs) == 4 + 3 + 3 + 2 * 3


def test_killed_consumer_records_redelivered_after_lock(floe_agent, java, reap) -> None:
    j, cp = java
    bs = floe_agent.bootstrap
    lock_ms = 10_000  # long enough for the second consumer to join on a loaded box before the kill
    js.run(
        j, cp, "setup", bs, "kill", "1", "gk", "share.auto.offset.reset=earliest",
        f"share.record.lock.duration.ms={lock_ms}",
    )  # fmt: skip
    js.run(j, cp, "produce", bs, "kill", "20", "h")
    holder = reap(js.start(j, cp, "consume", bs, "kill", "gk", "hold", "100", "1000", "60000"))
    held: list[str] = []
    assert holder.stdout is not None
    for line in holder.stdout:
        if line.startswith("REC "):
            held.append(line)
        if line.startswith("HELD"):
            break
    held_values = {r[4] for r in js.records("".join(held))}
    assert held_values == {f"h-{i}" for i in range(20)}
    from agent.metrics import METRICS  # the agent runs in this process: its /metrics registry

    assert METRICS.registry.get_sample_value("floe_share_group_records", {"group": "gk", "state": "acquired"}) == 20
    other = reap(js.start(j, cp, "consume", bs, "kill", "gk", "implicit", "100", "2000", "30000"))
    assert other.stdout is not None
    assert other.stdout.readline().strip() == "READY"
    _wait_members(floe_agent.port, "gk", 2)  # the second consumer has joined and has its assignment
    killed_at = time.time() * 1000
    holder.kill()
    holder.wait()
    [out] = _finish([other])
    recs = js.records(out)
    assert {r[4] for r in recs} == held_values
    assert all(r[3] == 2 for r in recs), recs  # the second delivery
    latest = max(r[0] for r in recs)
    assert latest - killed_at <= lock_ms + 1000, latest - killed_at
    print(f"redelivered {len(recs)} records {latest - killed_at:.0f} ms after kill -9 (lock {lock_ms} ms)")
