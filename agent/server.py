"""The agent process: Kafka listener + admin HTTP (``/metrics``, ``/healthz``, ``/readyz``).

``AgentServer`` binds the Kafka port with a ``BufferedProtocol`` per
connection (see :mod:`agent.connection`) and dispatches frames to the handler
registry. TLS listeners are bound as plain TCP: :mod:`agent.security.tls_accept`
counts each connection at accept and runs the handshake under a deadline. ``run_agent`` is what ``floe agent`` / ``floe dev`` call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agent.broker import Broker
from agent.cluster.peer_cache import resolve_peer_address
from agent.config import AgentConfig
from agent.connection import KafkaConnection
from agent.emf import EmfReporter
from agent.faults import Faults, add_fault_routes, wrap_dispatch
from agent.handlers import make_dispatcher
from agent.health import Readiness
from agent.metrics import METRICS
from agent.planning import PREFIX as PLANNING_PREFIX
from agent.planning import add_planning_routes
from agent.produce.admission import memory_budget_of
from agent.produce.budget import share
from agent.security.limits import ConnectionLimits, DeadlineSweeper, ResponseBudget
from agent.security.listeners import Listener
from agent.security.setup import Security
from agent.security.tls import admin_server_tls
from agent.security.tls_accept import PendingHandshakes, TlsAccept
from metastore.internal_auth import is_loopback, peer_surface_middleware, peer_token

log = logging.getLogger(__name__)

# First-generation GC threshold of an agent process (CPython's default is 700).
GC_GEN0_THRESHOLD = 20_000
# The interpreter's GIL switch interval in an agent process (CPython's default 5 ms).
SWITCH_INTERVAL_S = 0.001
# Shutdown (run_agent): the share of shutdown_timeout_ms spent draining (commit what is
# buffered, answer what was read); the rest closes the parts, each step at most
# CLOSE_STEP_S. EXIT_FORCED is the exit status when the bound was reached.
DRAIN_SHARE = 0.7
CLOSE_STEP_S = 5.0
EXIT_FORCED = 1


class AgentServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._server: asyncio.Server | None = None
        self._shared: asyncio.Server | None = None
        self._extra: list[asyncio.Server] = []
        self.security = Security(broker.config, broker.meta, broker.clock.now_ms)
        self.ports: dict[str, int] = {}  # listener name -> bound port
        self._admin: web.AppRunner | None = None
        self.admin_scheme = "http"
        self._conns: set[KafkaConnection] = set()
        cfg0 = broker.config
        self.limits = ConnectionLimits(cfg0.max_connections, cfg0.max_connections_per_ip)
        self.response_budget = ResponseBudget(cfg0.queued_max_request_bytes)
        # One memory budget per process for produce and responses (issue 43).
        share(broker.pipeline.budget, self.response_budget, memory_budget_of(cfg0))
        self.handshakes = PendingHandshakes(cfg0.max_pending_tls_handshakes)
        self.sweeper = DeadlineSweeper(
            lambda: self._conns,
            idle_ms=cfg0.connections_max_idle_ms,
            request_ms=cfg0.request_timeout_ms,
            auth_ms=cfg0.authentication_timeout_ms,
        )
        self.port = 0
        self.admin_port = 0
        self.faults = Faults()  # debug_faults: POST /debug/delay (agent.faults)
        cfg = broker.config
        self.readiness = Readiness(
            broker.meta,
            broker.store,
            broker.pipeline.oldest_pending_s,
            agent_id=cfg.agent_id,
            clock=broker.clock,
            interval_s=cfg.ready_interval_ms / 1000,
            deadline_s=cfg.ready_deadline_ms / 1000,
            stall_s=cfg.ready_stall_ms / 1000,
        )
        self.emf: EmfReporter | None = None
        if cfg.cloudwatch_emf_interval_s > 0:
            self.emf = EmfReporter(
                METRICS.registry,
                namespace=cfg.cloudwatch_namespace,
                dimensions={"ClusterId": cfg.cluster_id, "Zone": cfg.zone},
                interval_s=cfg.cloudwatch_emf_interval_s,
                now_ms=broker.clock.now_ms,
            )

    async def start(self) -> None:
        cfg = self.broker.config
        dispatch = make_dispatcher(self.broker)
        if cfg.debug_faults:  # tests and benchmarks only: every answer can be made late
            dispatch = wrap_dispatch(dispatch, self.faults)
        loop = asyncio.get_running_loop()

        sec = self.security

        def factory_for(listener: Listener) -> Any:
            on_connect = sec.tls.on_connect if listener.tls and sec.tls is not None else None

            def make_conn(accepted_at: float | None = None) -> KafkaConnection:
                conn = KafkaConnection(
                    dispatch,
                    max_frame_bytes=cfg.max_request_bytes,
                    max_inflight=cfg.max_inflight_requests,
                    on_close=self._closed,
                    on_connect=on_connect,
                    # A TLS connection was counted at accept by its TlsAccept.
                    limits=None if accepted_at is not None else self.limits,
                    budget=self.response_budget,
                    max_pre_auth_frame_bytes=cfg.max_pre_auth_frame_bytes,
                )
                conn.listener = listener
                conn.auth = sec.new_session(listener)
                conn.pre_auth = conn.auth is not None  # small frames until authenticated
                if accepted_at is not None:  # the authentication deadline counts from the TCP accept
                    conn.accepted_at = accepted_at
                elif conn.pre_auth:  # evictable at max_connections until authenticated
                    self.limits.add_pending(conn, lambda: self._evict_unauthenticated(conn))
                self._conns.add(conn)
                METRICS.connections.set(len(self._conns))
                return conn

            ctx = sec.ssl_context(listener)
            if ctx is None:
                return make_conn
            hs_s = cfg.ssl_handshake_timeout_ms / 1000

            def tls_factory() -> TlsAccept:
                # Count at accept, start TLS ourselves (agent.security.tls_accept).
                return TlsAccept(
                    ctx, make_conn, limits=self.limits, handshake_timeout_s=hs_s, clock=time.monotonic,
                    pending=self.handshakes,
                )  # fmt: skip

            return tls_factory

        primary, *others = sec.listeners
        self._server = await loop.create_server(
            factory_for(primary), primary.host, primary.port, reuse_address=True, backlog=1024
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.ports[primary.name] = self.port
        for lst in others:
            srv = await loop.create_server(factory_for(lst), lst.host, lst.port, reuse_address=True, backlog=1024)
            self._extra.append(srv)
            self.ports[lst.name] = srv.sockets[0].getsockname()[1]
        if cfg.shared_port:
            # The host's workers all listen here (the kernel spreads connections);
            # each also has its own port above, which Metadata and FindCoordinator
            # advertise, so a client reaches the worker that owns its partition/group.
            self._shared = await loop.create_server(
                factory_for(primary), primary.host, cfg.shared_port, reuse_address=True, reuse_port=True,
                backlog=1024,
            )  # fmt: skip
        self.broker.set_endpoints(
            {lst.name: (lst.advertised_host, lst.advertised_port or self.ports[lst.name]) for lst in sec.listeners},
            primary.name,
        )
        self.broker.start()
        self.sweeper.start()
        await self._start_admin(cfg, dispatch)
        # Build the object-store client now: botocore loads its models synchronously
        # (seconds of CPU on a busy host); done on the first produce it would stall
        # the loop, and with it the heartbeat, long enough to drop out of the ring.
        make_client = getattr(self.broker.store, "client", None)
        if callable(make_client):
            with suppress(Exception):
                await make_client()
        cluster = self.broker.cluster
        peer_host, peer_port = resolve_peer_address(cfg.peer_address, cfg.admin_host or cfg.host, self.admin_port)
        cluster.set_me(dataclasses.replace(cluster.me, admin_port=peer_port, peer_host=peer_host))
        try:
            await cluster.start()
        except BaseException:
            await self._abort()
            raise
        self.readiness.start()
        if self.emf is not None:
            self.emf.start()
        log.info(
            "floe agent %s (node %d) listening on %s:%d, advertised %s:%d, peer address %s:%d",
            cfg.agent_id, self.broker.node_id, cfg.host, self.port,
            self.broker.advertised.host, self.broker.advertised.port, peer_host, peer_port,
        )  # fmt: skip

    async def _abort(self) -> None:
        """Undo a half-done start (the cluster refused us): close listeners and parts."""
        await self.sweeper.stop()
        for srv in (self._server, self._shared, *self._extra):
            if srv is not None:
                srv.close()
        if self._admin is not None:
            await self._admin.cleanup()
        with suppress(Exception):
            await self.broker.close()

    @staticmethod
    def _evict_unauthenticated(conn: KafkaConnection) -> bool:
        if conn.closed or not conn.pre_auth:
            return False
        conn.close()
        return True

    def _closed(self, conn: KafkaConnection) -> None:
        self.limits.forget(conn)
        # Its uncommitted produce requests will never be answered: leave them out of
        # their commits, so a client re-sending them under a new epoch stores one copy.
        self.broker.pipeline.withdraw(conn.produce_flow)
        self._conns.discard(conn)
        METRICS.connections.set(len(self._conns))

    async def _start_admin(self, cfg: AgentConfig, dispatch: object = None) -> None:
        # /metrics, /healthz, /readyz stay open; peer /blocks and the /kafka group relay
        # need the peer credential; the planning API authenticates Kafka principals itself.
        peer = peer_token(cfg.peer_token, cfg.internal_token)
        app = web.Application(middlewares=[peer_surface_middleware(peer, (PLANNING_PREFIX,))])
        if not peer and not is_loopback(cfg.admin_host or cfg.host):
            log.warning(
                "no peer credential (FLOE_PEER_TOKEN or FLOE_INTERNAL_TOKEN): the admin port's"
                " internal routes (/blocks, /kafka) answer loopback callers only"
            )

        async def metrics(_: web.Request) -> web.Response:
            METRICS.cache_hits.set(self.broker.cache.stats.hits)
            METRICS.cache_misses.set(self.broker.cache.stats.misses)
            return web.Response(body=generate_latest(METRICS.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

        async def healthz(_: web.Request) -> web.Response:
            return web.json_response(
                {
                    "status": "ok",
                    "agent_id": cfg.agent_id,
                    "node_id": self.broker.node_id,
                    "kafka_port": self.port,
                    "shared_port": cfg.shared_port or None,
                    "pid": os.getpid(),
                    "ring": [p.agent_id for p in self.broker.cluster.brokers()],
                    "evictions": self.broker.cluster.membership.evictions,
                }
            )

        app.router.add_get("/metrics", metrics)
        async def readyz(_: web.Request) -> web.Response:
            state = self.readiness.state
            return web.json_response(state.as_json(), status=200 if state.ready else 503)

        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        self.broker.cluster.add_routes(app, self.broker.cache, dispatch)
        add_fault_routes(app, self.faults, enabled=cfg.debug_faults)
        add_planning_routes(app, self.broker)
        # aiohttp closes a connection still waiting for a complete request header
        # keepalive_timeout after its accept or its last response; its default is an
        # hour, so a slow-header client held a socket that long (issue 42).
        self._admin = web.AppRunner(app, access_log=None, keepalive_timeout=cfg.admin_idle_timeout_ms / 1000)
        await self._admin.setup()
        # admin_tls (issue 42): HTTPS only, the Kafka listeners' certificate unless it has its own.
        tls = admin_server_tls(cfg)
        self.admin_scheme = "https" if tls is not None else "http"
        site = web.TCPSite(
            self._admin, cfg.admin_host or cfg.host, cfg.admin_port, ssl_context=tls.context if tls is not None else None
        )
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.admin_port = server.sockets[0].getsockname()[1]

    async def close(self, drain_timeout: float = 10.0, close_timeout: float = CLOSE_STEP_S) -> None:
        """Graceful shutdown: stop accepting and reading, flush and commit what is
        buffered, answer the requests waiting for it, then close connections.

        Bounded: the drain (commit what is buffered, answer what was read) gets
        ``drain_timeout`` in all, each step after it (closing the admin port, the
        broker's parts: metastore pool, object store, coordinators) at most
        ``close_timeout``; a step past its bound is abandoned with a warning."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_timeout

        def left() -> float:
            return max(0.0, deadline - loop.time())

        for srv in (self._server, self._shared, *self._extra):
            if srv is not None:
                srv.close()
        await self.sweeper.stop()
        await self.readiness.stop()
        if self.emf is not None:
            await self.emf.stop()
        await _bounded(self.broker.cluster.stop(), min(close_timeout, left()), "leaving the ring")
        for c in list(self._conns):
            c.stop_reading()
        self.broker.pipeline.seal()
        await _bounded(self.broker.pipeline.drain(), left(), "draining the produce pipeline")
        await asyncio.gather(*(c.wait_answered(left()) for c in list(self._conns)))
        for c in list(self._conns):
            c.close()
        if self._server is not None:
            await _bounded(self._server.wait_closed(), min(close_timeout, 5.0), "closing the listener")
        if self._admin is not None:
            await _bounded(self._admin.cleanup(), close_timeout, "closing the admin port")
        await _bounded(self.broker.close(), close_timeout, "closing the broker")


async def _bounded(aw: Awaitable[object], timeout: float, what: str) -> bool:  # noqa: ASYNC109
    """Await ``aw`` for at most ``timeout`` s; False (logged) when it did not finish or failed."""
    try:
        await asyncio.wait_for(aw, max(timeout, 0.001))
        return True
    except TimeoutError:
        log.warning("shutdown: %s took longer than %.1f s; going on without it", what, timeout)
    except Exception as e:
        log.warning("shutdown: %s failed: %s", what, e)
    return False


def tune_runtime() -> None:
    """Make the cyclic GC cheap for a server that churns small objects, and hand
    the GIL over sooner (issue 13).

    Called once the agent is up: ``gc.freeze()`` moves everything allocated so
    far (modules, SQLAlchemy, the broker's state) to the permanent generation, so
    full collections stop re-scanning it; and a larger first-generation threshold
    lets the objects of a request (decoded request, response, futures) die by
    reference count before a collection has to traverse and promote them. At
    librdkafka's defaults (one record per Produce request) collections triggered
    by the default threshold of 700 were ~10% of the event loop.

    The metastore commit runs in a thread (aiosqlite's, asyncpg's I/O is on the
    loop) that needs the GIL back after every statement; behind a busy event loop
    each re-take waited for the 5 ms switch interval. At 1 ms the SQLite group
    commit at 20,000 msg/s (librdkafka defaults) went from 210 to 70 ms mean.
    """
    gc.freeze()
    _g0, g1, g2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, g1, g2)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def arm_exit_deadline(seconds: float, hard_exit: Callable[[int], object] = os._exit) -> threading.Timer:
    """Exit the process ``seconds`` from now whatever still runs: a daemon timer
    thread, so neither a stuck await nor a blocked event loop nor the interpreter's
    exit (joining executor threads) can keep the process, or its ports, alive."""

    def fire() -> None:
        log.error("shutdown did not finish within %.1f s: exiting now", seconds)
        for stream in (sys.stdout, sys.stderr):
            with suppress(Exception):
                stream.flush()
        hard_exit(EXIT_FORCED)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


async def run_agent(
    config: AgentConfig,
    *,
    ready: asyncio.Event | None = None,
    hard_exit: Callable[[int], object] = os._exit,
) -> None:
    """Run until SIGINT/SIGTERM; flush and commit buffered produce data on the way out.

    The signal handlers go in before anything starts: the listeners serve (and
    buffer produce data) while the start still awaits the object-store client and
    the ring, and a SIGTERM then must drain like any other, not kill the process.

    The shutdown is bounded by ``shutdown_timeout_ms`` from the first signal: the
    drain gets most of it (``DRAIN_SHARE``), closing the rest; past it the process
    exits through ``hard_exit`` (:func:`arm_exit_deadline`), drained or not."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    budget = config.shutdown_timeout_ms / 1000
    deadline: list[threading.Timer] = []

    def on_signal() -> None:
        if not deadline:
            deadline.append(arm_exit_deadline(budget, hard_exit))
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
    broker = await Broker.open(config)
    server = AgentServer(broker)
    await server.start()
    tune_runtime()
    print(f"floe agent listening on {config.host}:{server.port} (admin {server.admin_scheme}://{config.host}:{server.admin_port})", flush=True)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        t0 = loop.time()
        drain = budget * DRAIN_SHARE
        step = max(0.1, min(CLOSE_STEP_S, (budget - drain) / 3))
        await _bounded(server.close(drain, step), budget, "the shutdown")
        log.info("shut down in %.1f s (bound %.0f s)", loop.time() - t0, budget)
