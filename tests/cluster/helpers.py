"""Helpers of the cluster tests: a 3-agent cluster of real processes and waits."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from tests.fixtures.agent_process import AgentGroup, AgentProcess, Backend

TIMEOUT = 30.0


def wait_for(
    cond: Callable[[], Any], timeout: float = TIMEOUT, what: str = "condition", every: float = 0.1
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(every)  # bounded poll on a real condition
    raise AssertionError(f"timed out waiting for {what}")


def start_cluster(
    tmp: Path, backend: Backend, zones: list[str], *, flush_interval_ms: int = 20, **env: Any
) -> tuple[AgentGroup, list[AgentProcess]]:
    group = AgentGroup(tmp, backend)
    env.setdefault("cluster_heartbeat_ms", 300)
    env.setdefault("cluster_dead_after_ms", 2500)
    agents = [group.make(zone=z, flush_interval_ms=flush_interval_ms, **env) for z in zones]
    for a in agents:
        wait_for(
            lambda a=a: len(brokers(a)) == len(agents),
            what=f"{a.bootstrap} to see {len(agents)} agents",
        )
    return group, agents


def admin(agent: AgentProcess, **conf: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": agent.bootstrap, **conf})


def brokers(agent: AgentProcess, client_id: str = "probe") -> dict[int, tuple[str, int]]:
    md = admin(agent, **{"client.id": client_id}).list_topics(timeout=5)
    return {b.id: (b.host, b.port) for b in md.brokers.values()}


def leaders(agent: AgentProcess, topic: str, client_id: str) -> dict[int, int]:
    md = admin(agent, **{"client.id": client_id}).list_topics(topic, timeout=5)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def node_of(agent: AgentProcess) -> int:
    """The agent's Kafka node id (from its /healthz: ids derive from agent ids)."""
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{agent.admin_port}/healthz", timeout=5) as r:
        return int(json.load(r)["node_id"])


def create_topic(agent: AgentProcess, name: str, partitions: int) -> None:
    ad = admin(agent)  # kept alive until the future resolves
    ad.create_topics([NewTopic(name, partitions)], request_timeout=TIMEOUT)[name].result(TIMEOUT)


def metrics(agents: list[AgentProcess], *names: str) -> dict[str, float]:
    return {n: sum(a.metric(n) for a in agents if a.running()) for n in names}
