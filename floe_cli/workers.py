"""``floe agent --workers N`` / ``floe dev --workers N``: N agent processes on one host.

One agent is one Python process and uses one core at most. The supervisor here
starts N workers, each a full agent (``python -m floe_cli.main agent``) with its
own id in the ring (``<agent id>-w<i>``), its own segments, cache and metastore
pool, and two Kafka listeners:

* the host's Kafka port (``--port``, or the one listener of ``FLOE_LISTENERS``),
  bound by every worker with SO_REUSEPORT, so the kernel spreads new
  connections over them (bootstrap);
* a port of its own (any free port), which is what the worker advertises in
  Metadata and FindCoordinator: a client is led to the worker that is the ring
  owner of its partitions and groups, as with separate agents.

Worker ``i`` serves /metrics and /healthz on ``--admin-port + i`` (metrics are
per worker; sum them for the host); choose the admin port outside the kernel's
ephemeral range (like the default 9644), or a worker's own Kafka port may take one. Everything that must be shared between
workers already goes through the metastore (offsets, producer ids and
sequences, group generations) or the cluster layer (membership, wake-ups of
long-polling fetches: Postgres NOTIFY or watermark polling).

The supervisor restarts a worker that dies; SIGTERM/SIGINT go to every worker,
and each drains (seals, uploads and commits what it buffered, answers waiting
requests) before it exits. Workers get SIGTERM if the supervisor dies.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.config import AgentConfig

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def worker_env(
    kw: dict[str, Any], i: int, base_id: str, port: int, environ: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of worker ``i``: the host's settings (its ``FLOE_*`` environment,
    overridden by the command line's ``kw``) plus the worker's own identity and ports.

    Each worker listens on a port of its own beside the shared one. It advertises
    that port unless an advertised port is configured (a load balancer or proxy in
    front of the host): then every worker advertises it, like agents sharing one
    address (requests for groups and transactions reach their owner by relay)."""
    base = dict(os.environ if environ is None else environ)
    env = dict(base)
    for k, v in kw.items():
        if v is not None:
            env[f"FLOE_{k.upper()}"] = str(v)
    env["FLOE_WORKERS"] = "1"  # a worker is one agent (never a supervisor of its own)
    env["FLOE_AGENT_ID"] = f"{base_id}-w{i}"
    env["FLOE_SHARED_PORT"] = str(port)
    env["FLOE_PORT"] = "0"  # its own port
    if not int(env.get("FLOE_ADVERTISED_PORT") or 0):
        env["FLOE_ADVERTISED_PORT"] = "0"  # advertise its own port
    admin = int(env.get("FLOE_ADMIN_PORT") or 0)
    env["FLOE_ADMIN_PORT"] = str(admin + i if admin else 0)
    return env


def shared_listener(config: AgentConfig) -> tuple[str, int]:
    """With ``listeners`` configured (the Terraform module's ``SASL_SSL://0.0.0.0:9092``):
    (the listener each worker binds, same protocol and host on a port of its own,
    the port the workers share). Raises ValueError for a malformed list or for
    several listeners (only one can be shared)."""
    from agent.security.listeners import parse_listeners

    listeners = parse_listeners(config)
    if len(listeners) > 1:
        raise ValueError(f"workers share one listener; listeners names {len(listeners)} (use --workers 1)")
    lst = listeners[0]
    host = f"[{lst.host}]" if ":" in lst.host else lst.host
    return f"{lst.name}://{host}:0", lst.port


def run_workers(kw: dict[str, Any], n: int, log_level: str) -> int:
    port = int(kw.get("port") or os.environ.get("FLOE_PORT") or 9092)
    if port == 0:
        raise SystemExit("floe: --workers needs a fixed --port (the port the workers share)")
    base_id = str(kw.get("agent_id") or os.environ.get("FLOE_AGENT_ID") or uuid.uuid4().hex[:12])
    # --workers 1: a worker is one agent, whatever FLOE_WORKERS the host sets.
    cmd = [sys.executable, "-m", "floe_cli.main", "agent", "--workers", "1", "--log-level", log_level]
    stop = False

    def on_signal(signum: int, _frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def spawn(i: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(cmd, env=worker_env(kw, i, base_id, port), preexec_fn=_die_with_parent)

    workers = [spawn(i) for i in range(n)]
    started = [time.monotonic()] * n
    quick_exits = [0] * n  # consecutive exits within 10 s of a start: a worker that cannot run
    rc_out = 0
    print(f"floe: {n} workers sharing Kafka port {port}: pids {[w.pid for w in workers]}", flush=True)
    while not stop:
        for i, w in enumerate(workers):
            rc = w.poll()
            if rc is None or stop:
                continue
            quick_exits[i] = quick_exits[i] + 1 if time.monotonic() - started[i] < 10 else 1
            if quick_exits[i] >= 5:
                print(f"floe: worker {i} keeps exiting ({rc}); stopping", file=sys.stderr, flush=True)
                stop, rc_out = True, 1
                break
            print(f"floe: worker {i} (pid {w.pid}) exited with {rc}; restarting", file=sys.stderr, flush=True)
            workers[i] = spawn(i)
            started[i] = time.monotonic()
        time.sleep(0.2)
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    for w in workers:
        try:
            w.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()
    return rc_out
