"""Share groups under agent kill -9: a checker over Java 4.2 share consumers.

Two agent processes on Postgres + a moto S3 bucket; a two-partition topic with
records of three kinds: ``ok`` (accepted), ``rej`` (rejected), ``rel`` (released
every time, so archived at ``share.delivery.count.limit`` = 3). Three Java
``KafkaShareConsumer`` processes in explicit acknowledgement mode consume
slowly through both agents; one agent is killed with SIGKILL while records are
acquired and acknowledged, then restarted. Every delivery (partition, offset,
delivery count, receive time) and every acknowledgement commitSync reported
stored is logged.

Checks:

* no record is delivered after an ACCEPT (or REJECT) of it was stored;
* no delivery count exceeds the limit;
* nothing is lost: every offset of both partitions was delivered, and at the end
  the share-partition start offset (DescribeShareGroupOffsets) is each
  partition's end with lag 0: every record accepted, rejected or archived.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from kafka_protocol import messages as M
from tests.cluster.helpers import brokers, start_cluster, wait_for
from tests.fixtures.agent_process import Backend
from tests.interop._raw import RawConn
from tests.share import java_share as js

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.postgres, pytest.mark.s3, pytest.mark.timeout(420)]

LIMIT = 3
LOCK_MS = 3000
OK, REJ, REL = 200, 30, 30


class Reader(threading.Thread):
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.lines: list[str] = []

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)


def _offsets(port: int, group: str) -> dict[int, tuple[int, int]]:
    G = M.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
    with RawConn(port) as c:
        r = c.request(M.DescribeShareGroupOffsetsRequest(groups=[G(group_id=group, topics=None)]), M.DescribeShareGroupOffsetsResponse, 1)
    return {p.partition_index: (p.start_offset, p.lag) for t in r.groups[0].topics for p in t.partitions}


def test_share_consumers_through_agent_kill(tmp_path: Path, postgres_url: str, s3_url: str) -> None:
    backend = Backend("postgres-s3", postgres_url, s3_url)
    group, agents = start_cluster(tmp_path, backend, ["a", "a"])
    java, cp = js.build(tmp_path)
    try:
        a0, a1 = agents
        bs = f"{a0.bootstrap},{a1.bootstrap}"
        js.run(
            java, cp, "setup", a0.bootstrap, "sq", "2", "chk", "share.auto.offset.reset=earliest",
            f"share.delivery.count.limit={LIMIT}", f"share.record.lock.duration.ms={LOCK_MS}",
        )  # fmt: skip
        js.run(java, cp, "produce", a0.bootstrap, "sq", str(OK), "ok")
        js.run(java, cp, "produce", a0.bootstrap, "sq", str(REJ), "rej")
        js.run(java, cp, "produce", a0.bootstrap, "sq", str(REL), "rel")
        procs = [js.start(java, cp, "consume", bs, "sq", "chk", "explicit", "5", "9000", "200000", "250") for _ in range(3)]
        readers = [Reader(p) for p in procs]
        for r in readers:
            r.start()
        wait_for(lambda: sum(1 for r in readers for ln in r.lines if ln.startswith("ACKOK")) >= 40, 120, "first acks")
        a1.kill()  # SIGKILL while records are acquired and acknowledged
        killed_at = time.time()
        wait_for(lambda: len(brokers(a0)) == 1, 30, "the ring to drop the killed agent")
        a1.start()
        for p in procs:
            p.wait(timeout=300)
        for r in readers:
            r.join(10)
        outs = ["".join(r.lines) for r in readers]
        errs = [p.stderr.read() if p.stderr else "" for p in procs]
        assert all(p.returncode == 0 for p in procs), errs
        recs = [x for o in outs for x in js.records(o)]
        acks = [x for o in outs for x in js.acks(o)]
        deliveries: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for ts, p, off, dc, _ in recs:
            deliveries.setdefault((p, off), []).append((ts, dc))
        assert max(dc for _, _, _, dc, _ in recs) <= LIMIT, "a delivery count beyond the limit"
        final: set[tuple[int, int]] = set()
        for ts, p, off, t in acks:
            if t.upper() in ("ACCEPT", "REJECT"):
                final.add((p, off))
                later = [d for d in deliveries[(p, off)] if d[0] > ts]
                assert not later, f"{p}/{off} delivered again after {t} stored: {later}"
        # Every ok/rej record ends accepted/rejected by a stored acknowledgement, unless its
        # lock expired LIMIT times (the kill) and it was archived instead.
        assert len(final) >= OK + REJ - 10, len(final)
        per_part = (OK + REJ + REL) // 2
        assert set(deliveries) == {(p, o) for p in (0, 1) for o in range(per_part)}, "records never delivered"
        offsets = wait_for(lambda: (o := _offsets(a0.port, "chk")) and o, 30, "share group offsets")
        assert offsets == {0: (per_part, 0), 1: (per_part, 0)}, offsets
        redelivered = sum(1 for ds in deliveries.values() if len(ds) > 1)
        print(
            f"\nshare checker: {len(recs)} deliveries of {2 * per_part} records, {len(final)} records with a stored accept/reject, "
            f"{redelivered} records delivered more than once, max delivery count {max(d for *_, d, _ in recs)}, "
            f"{sum(o.count('ACKUNSENT ') for o in outs)} acknowledgements commitSync left unsent, "
            f"kill at +{killed_at - min(t for t, *_ in recs) / 1000:.1f} s"
        )
    finally:
        group.close(False)
