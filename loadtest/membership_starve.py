"""Membership on a CPU-starved host (issue 43, item 7): no flaps, and a kill still seen.

Two ``floe agent`` processes on one SQLite metastore (``--backend postgres``: a
private PostgreSQL), default heartbeat (1 s) and dead-after (5 s), on a host kept
CPU-starved by ``--hogs`` busy-loop processes at the agents' own priority (nice
0). For ``--minutes`` nothing is killed: every membership change counted by the
agents (``floe_membership_changes_total``) or logged (``left the ring``) is a
flap, and there should be none. Then one agent is killed with SIGKILL, hogs
still running, and the script times how long the other takes to drop it from
its ring (its /healthz, polled, and its own log line); then the same on an
unloaded host after restarting the killed agent.

Idle agents need little CPU, so busy loops alone may not stall them for
dead-after. ``--stall-every S --stall-s D`` adds what a starved host does at its
worst: every S seconds both agents are frozen (SIGSTOP) for D seconds and then
resumed (SIGCONT, in alternating order), so each reads the other's heartbeat D
seconds old at its first, late, beat.

    python -m loadtest.membership_starve --minutes 10

Where it sits: a stand-alone check beside the benchmarks; agents are started with
:func:`loadtest.services.start_agent`, numbers go to stdout (and ``--out``, JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

from loadtest.services import Agent, scrape, start_agent

CHANGES = 'floe_membership_changes_total{change="%s"}'
LATE = "floe_membership_late_beats_total"
ISOLATIONS = "floe_isolations_total"  # slow-agent isolation also moves leaders: none wanted either
CHANGED = re.compile(r"membership changed: \d+ agents")  # one line per change, any version
LEFT = re.compile(r"^(\S+ \S+) WARNING agent\.cluster\.membership: agent (\S+) left the ring: (.*)$", re.M)


def ring(agent: Agent) -> list[str] | None:
    try:
        with urllib.request.urlopen(f"{agent.admin_url}/healthz", timeout=10) as r:
            return sorted(json.loads(r.read())["ring"])
    except (OSError, ValueError, KeyError):
        return None  # a starved agent may not answer in time: not a membership change


def counts(agent: Agent) -> dict[str, float]:
    m = scrape(agent.admin_url, timeout=30)
    return {"join": m.get(CHANGES % "join", 0.0), "leave": m.get(CHANGES % "leave", 0.0), "late": m.get(LATE, 0.0),
            "isolations": m.get(ISOLATIONS, 0.0)}


def wait_until(cond: Any, timeout: float, what: str, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if v := cond():
            return v
        time.sleep(every)  # bounded poll on a real condition
    raise RuntimeError(f"timed out waiting for {what}")


def start_hogs(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` busy loops at our own priority (nice 0, like the agents)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_hogs(hogs: list[subprocess.Popen[bytes]]) -> None:
    for h in hogs:
        if h.poll() is None:
            h.kill()
    for h in hogs:
        h.wait()


def time_to_leave(observer: Agent, observer_id: str, victim: Agent, victim_id: str) -> dict[str, Any]:
    """SIGKILL ``victim``; seconds until ``observer``'s ring drops it (polled /healthz
    and the observer's own log line, whose time does not depend on our polling)."""
    log_from = observer.log_path.stat().st_size
    killed_wall, killed = time.time(), time.monotonic()
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait()
    wait_until(lambda: ring(observer) == [observer_id], 120, "the observer to drop the victim", 0.05)
    polled = time.monotonic() - killed
    text = observer.log_path.read_text(errors="replace")[log_from:]
    logged = None
    for stamp, who, why in LEFT.findall(text):
        if who == victim_id:
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
            logged = {"seconds": round(at - killed_wall, 2), "why": why}
    return {"polled_s": round(polled, 2), "logged": logged, "loadavg": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m loadtest.membership_starve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="starved time with nothing killed")
    ap.add_argument("--hogs", type=int, default=20, help="busy-loop processes (nice 0)")
    ap.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    ap.add_argument("--sample-s", type=float, default=5.0, help="how often the rings and load are sampled")
    ap.add_argument("--out", type=Path, help="also write the summary here (JSON)")
    ap.add_argument("--stall-every", type=float, default=0.0, help="freeze both agents this often (s; 0: never)")
    ap.add_argument("--stall-s", type=float, default=8.0, help="for this long (s)")
    args = ap.parse_args(argv)

    with ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="floe-starve-")))
        if args.backend == "postgres":
            from metastore.pgserver import PostgresServer

            pg = PostgresServer().start()
            stack.callback(pg.stop)
            metastore = pg.url()
        else:
            metastore = f"sqlite:///{work / 'meta.db'}"
        objects = f"file://{work / 'objects'}"

        def agent(name: str) -> Agent:
            a = start_agent(
                metastore, objects, work, name=name, log_level="INFO", extra_args=["--agent-id", f"starve-{name}"]
            )
            stack.callback(a.stop)
            return a

        a, b = agent("a"), agent("b")
        both = ["starve-a", "starve-b"]
        wait_until(lambda: ring(a) == both and ring(b) == both, 60, "both agents to see each other")
        before = {"a": counts(a), "b": counts(b)}
        log_from = {"a": a.log_path.stat().st_size, "b": b.log_path.stat().st_size}
        hogs = start_hogs(args.hogs)
        stack.callback(stop_hogs, hogs)
        print(f"starving: {args.hogs} hogs, {args.minutes:g} min, backend {args.backend}", flush=True)
        samples, odd, loads, stalls = 0, [], [], 0
        t0 = next_stall = time.monotonic()
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(args.sample_s)  # the sampling period, not a synchronisation
            if args.stall_every and time.monotonic() >= next_stall + args.stall_every:
                next_stall, stalls = time.monotonic(), stalls + 1
                order = [a, b] if stalls % 2 else [b, a]
                for ag in order:
                    os.kill(ag.pid, signal.SIGSTOP)
                time.sleep(args.stall_s)  # the injected stall itself
                for ag in order:
                    os.kill(ag.pid, signal.SIGCONT)
            loads.append(os.getloadavg()[0])
            samples += 1
            for name, ag in (("a", a), ("b", b)):
                r = ring(ag)
                if r is not None and r != both:
                    odd.append((round(time.monotonic() - t0, 1), name, r))
            if samples % max(1, int(60 / args.sample_s)) == 0:
                print(f"  {(time.monotonic() - t0) / 60:.1f} min: load {os.getloadavg()}, odd rings {len(odd)}", flush=True)
        after = {"a": counts(a), "b": counts(b)}
        delta = {n: {k: after[n][k] - before[n][k] for k in after[n]} for n in after}
        logs = {n: ag.log_path.read_text(errors="replace")[log_from[n] :] for n, ag in (("a", a), ("b", b))}
        starved = {
            "minutes": args.minutes,
            "hogs": args.hogs,
            "stalls": stalls,
            "stall_s": args.stall_s if stalls else 0,
            "membership_changes": sum(d["join"] + d["leave"] for d in delta.values()),
            "isolations": sum(d["isolations"] for d in delta.values()),
            "per_agent": delta,
            "change_lines_logged": {n: len(CHANGED.findall(t)) for n, t in logs.items()},
            "left_lines_logged": {n: [f"{w}: {y}" for _, w, y in LEFT.findall(t)][:10] for n, t in logs.items()},
            "odd_ring_samples": odd[:20],
            "ring_samples": samples * 2,
            "loadavg_at_end": os.getloadavg(),
            "load1_mean": round(sum(loads) / max(1, len(loads)), 2),
            "load1_max": max(loads, default=0.0),
        }
        print(json.dumps({"starved": starved}, indent=1), flush=True)

        kill_starved = time_to_leave(a, "starve-a", b, "starve-b")
        print(json.dumps({"kill_while_starved": kill_starved}), flush=True)
        stop_hogs(hogs)
        b2 = agent("b2")  # the killed one's id is held until its row is stale: a new one
        both2 = ["starve-a", "starve-b2"]
        wait_until(lambda: ring(a) == both2, 60, "the new agent to join")
        kill_idle = time_to_leave(a, "starve-a", b2, "starve-b2")
        print(json.dumps({"kill_unloaded": kill_idle}), flush=True)
        if args.out:
            summary = {"starved": starved, "kill_while_starved": kill_starved, "kill_unloaded": kill_idle}
            args.out.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
