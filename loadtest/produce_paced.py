"""The paced ``java6`` shape of :mod:`loadtest.produce_cpu` (issue 40): a Java producer's
requests at a fixed rate, so the agent seals journal objects at the cadence of a real run.

Where it sits: called by ``python -m loadtest.produce_cpu --shapes java6 --journal 3``
(see that module's docstring for the agent it measures). ``java6`` is what a Java producer
with default settings sends to a 6-partition topic: one ~16 KiB batch (16 records of 1 KiB)
for each partition in every request, at most 5 requests in flight, paced at ``--rate``
MB/s. The report adds journal objects, metastore commits and consolidations per second and
the CPU per journal object.
"""

from __future__ import annotations

import cProfile
import io
import multiprocessing as mp
import os
import pstats
import socket
import time
from typing import Any

from loadtest.reqcost import produce_frames as frames
from loadtest.reqcost import read_responses

PACED = {"java6": (6, 6, 16)}  # partitions, per request, records/batch, sent at --rate MB/s
JAVA_IN_FLIGHT = 5  # max.in.flight.requests.per.connection


def _paced_driver(port: int, shape: tuple[int, int, int], topic: str, size: int, plan: list[float],
                  rate_mb: float, q: Any, go: Any) -> None:
    """Child process: encode once, then one paced run per entry of ``plan`` (seconds)."""
    fr = frames(topic, *shape, size)
    per_s = rate_mb * 1e6 / (shape[1] * shape[2] * size)
    q.put("ready")
    for seconds in plan:
        go.get()
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        n = max(1, int(seconds * per_s))
        errors, late = paced(s, fr, n, per_s, JAVA_IN_FLIGHT)
        s.close()
        q.put((errors, late))


def paced(s: socket.socket, fr: list[bytes], n: int, per_s: float, window: int) -> tuple[int, int]:
    """Send ``n`` of ``fr`` round-robin, request i at ``i / per_s`` s (later if ``window``
    are unanswered); (partition errors, requests sent late by more than one interval)."""
    import select

    sent = got = errors = late = 0
    buf = bytearray()
    t0 = time.perf_counter()
    while got < n:
        now = time.perf_counter()
        due = t0 + sent / per_s
        if sent < n and sent - got < window and now >= due:
            if now - due > 1 / per_s:
                late += 1
            s.sendall(fr[sent % len(fr)])
            sent += 1
            continue
        wait = max(0.0, due - now) if sent < n and sent - got < window else 1.0
        if not select.select([s], [], [], wait)[0]:
            continue
        k, e = read_responses(s, buf)
        got, errors = got + k, errors + e
    return errors, late


def _counters() -> dict[str, float]:
    """The agent's journal-path counters (this process's METRICS)."""
    from agent.metrics import METRICS

    def total(c: Any) -> float:
        return sum(s.value for m in c.collect() for s in m.samples if s.name.endswith("_total"))

    return {"journal_objects": total(METRICS.journal_objects), "commits": total(METRICS.commits),
            "committed_objects": total(METRICS.committed_objects),
            "consolidations": total(METRICS.consolidations)}


def measure_paced(agent: Any, name: str, size: int, seconds: float, rate_mb: float,
                  profile: int) -> dict[str, Any]:
    parts, per, records = PACED[name]
    topic = f"cpu-{name}"
    res = agent.call(agent.server.broker.meta.create_topic(topic, parts))
    assert not getattr(res, "error", 0), res
    ctx = mp.get_context("spawn")
    q, go = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_paced_driver, args=(agent.server.port, PACED[name], topic, size,
                                                [min(5.0, seconds), seconds], rate_mb, q, go))
    p.start()
    assert q.get(timeout=300) == "ready"
    go.put(1)
    warm_errors, _ = q.get(timeout=600)
    prof = cProfile.Profile(time.thread_time) if profile else None
    if prof is not None:
        agent.on_loop(prof.enable)
    c0, l0, t0, m0, w0 = (time.process_time(), agent.loop_cpu(), agent.threads_cpu(), _counters(),
                          time.perf_counter())
    go.put(1)
    errors, late = q.get(timeout=1800)
    c1, l1, t1, m1, w1 = (time.process_time(), agent.loop_cpu(), agent.threads_cpu(), _counters(),
                          time.perf_counter())
    if prof is not None:
        agent.on_loop(prof.disable)
    p.join(60)
    wall = w1 - w0
    total_gb = int(seconds * rate_mb * 1e6 / (per * records * size)) * per * records * size / 1e9
    objs = m1["journal_objects"] - m0["journal_objects"]
    out: dict[str, Any] = {
        "shape": name, "rate_mb_s": rate_mb, "wall_s": round(wall, 1), "gb": round(total_gb, 4),
        "errors": warm_errors + errors, "late_requests": late,
        "cpu_s": round(c1 - c0, 2), "cpu_s_per_gb": round((c1 - c0) / total_gb, 1),
        "cores": round((c1 - c0) / wall, 3),
        "loop_cpu_s_per_gb": round((l1 - l0) / total_gb, 1),
        "journal_objects_per_s": round(objs / wall, 1),
        "commits_per_s": round((m1["commits"] - m0["commits"]) / wall, 1),
        "committed_objects_per_s": round((m1["committed_objects"] - m0["committed_objects"]) / wall, 1),
        "consolidations": m1["consolidations"] - m0["consolidations"],
        "cpu_ms_per_journal_object": round((c1 - c0) / objs * 1e3, 3) if objs else None,
        "threads_cpu_s": {k: round(v - t0.get(k, 0.0), 2) for k, v in t1.items() if v - t0.get(k, 0.0) > 0.01},
    }
    if prof is not None:
        if os.environ.get("PRODUCE_CPU_PSTATS"):
            prof.dump_stats(f"{os.environ['PRODUCE_CPU_PSTATS']}.{name}.loop")
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(profile)
        out["profile"] = s.getvalue()
    return out
