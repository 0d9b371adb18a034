"""``floe agent --workers N`` / ``floe dev --workers N``: N agent processes on one host.

One agent is one Python process and uses one core at most. The supervisor here
starts N workers, each a full agent (``python -m floe_cli.main agent``) with its
own id in the ring (``<agent id>-w<i>``), its own segments, cache and metastore
pool, and two Kafka listeners:

* the host's Kafka port (``--port``, or the one listener of ``FLOE_LISTENERS``),
  bound by every worker with SO_REUSEPORT, so the kernel spreads new
  connections over them (bootstrap);
* a port of its own, which is what the worker advertises in Metadata and
  FindCoordinator: a client is led to the worker that is the ring owner of its
  partitions and groups, as with separate agents. By default any free port;
  with ``--worker-port-base B`` (``FLOE_WORKER_PORT_BASE``) worker ``i`` binds
  ``B + i``, so firewall rules and security groups can name the range.

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
    kw: dict[str, Any],
    i: int,
    base_id: str,
    port: int,
    environ: dict[str, str] | None = None,
    port_base: int = 0,
) -> dict[str, str]:
    """The environment of worker ``i``: the host's settings (its ``FLOE_*`` environment,
    overridden by the command line's ``kw``) plus the worker's own identity and ports.

    Each worker listens on a port of its own beside the shared one: ``port_base + i``,
    or any free port when ``port_base`` is 0. It advertises that port unless an
    advertised port is configured (a load balancer or proxy in front of the host):
    then every worker advertises it, like agents sharing one address (requests for
    groups and transactions reach their owner by relay)."""
    base = dict(os.environ if environ is None else environ)
    env = dict(base)
    for k, v in kw.items():
        if v is not None:
            env[f"FLOE_{k.upper()}"] = str(v)
    env["FLOE_WORKERS"] = "1"  # a worker is one agent (never a supervisor of its own)
    env["FLOE_AGENT_ID"] = f"{base_id}-w{i}"
    env["FLOE_SHARED_PORT"] = str(port)
    own = port_base + i if port_base else 0
    env["FLOE_PORT"] = str(own)  # its own port
    listeners = env.get("FLOE_LISTENERS", "")
    if own and listeners.endswith(":0"):  # shared_listener's "NAME://host:0"
        env["FLOE_LISTENERS"] = f"{listeners[:-2]}:{own}"
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


def check_port_base(port_base: int, n: int, port: int, admin: int) -> None:
    """Refuse a worker port range that is out of bounds or overlaps the shared Kafka
    port or the workers' admin ports (``admin .. admin + n - 1``)."""
    if not port_base:
        return
    ports = range(port_base, port_base + n)
    if port_base < 1 or ports[-1] > 65535:
        raise SystemExit(f"floe: --worker-port-base {port_base}: ports {port_base}..{ports[-1]} out of range")
    taken = {port} | (set(range(admin, admin + n)) if admin else set())
    if clash := sorted(taken.intersection(ports)):
        raise SystemExit(
            f"floe: --worker-port-base {port_base}: the workers' ports {port_base}..{ports[-1]}"
            f" include {clash} (the shared Kafka port or the admin ports)"
        )


def run_workers(kw: dict[str, Any], n: int, log_level: str, port_base: int = 0) -> int:
    port = int(kw.get("port") or os.environ.get("FLOE_PORT") or 9092)
    if port == 0:
        raise SystemExit("floe: --workers needs a fixed --port (the port the workers share)")
    admin = int(kw.get("admin_port") or os.environ.get("FLOE_ADMIN_PORT") or 0)
    check_port_base(port_base, n, port, admin)
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
        env = worker_env(kw, i, base_id, port, port_base=port_base)
        return subprocess.Popen(cmd, env=env, preexec_fn=_die_with_parent)

    workers = [spawn(i) for i in range(n)]
    started = [time.monotonic()] * n
    quick_exits = [0] * n  # consecutive exits within 10 s of a start: a worker that cannot run
    rc_out = 0
    own = f"own ports {port_base}..{port_base + n - 1}" if port_base else "own ports: any free"
    print(f"floe: {n} workers sharing Kafka port {port} ({own}): pids {[w.pid for w in workers]}", flush=True)
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
