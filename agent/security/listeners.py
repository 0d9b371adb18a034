"""Kafka-style listeners: ``PLAINTEXT://0.0.0.0:9092,SASL_SSL://0.0.0.0:9093``.

Sits between the configuration (``listeners`` / ``advertised_listeners``) and the
server (agent.server binds one socket per listener). Listener names are the
security protocols themselves (Kafka's default listener.security.protocol.map),
so a listener list names each protocol at most once. No listeners configured =
one PLAINTEXT listener on ``host:port``, exactly the behaviour before listeners.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.config import AgentConfig

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Listener:
    """One bound listener and what it needs from a client."""

    name: str  # = its security protocol
    host: str
    port: int
    advertised_host: str = ""
    advertised_port: int = 0  # 0 = the bound port

    @property
    def tls(self) -> bool:
        return self.name in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.name in ("SASL_PLAINTEXT", "SASL_SSL")


def _parse(text: str, what: str) -> list[tuple[str, str, int]]:
    out: list[tuple[str, str, int]] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        name = name.upper()
        if not sep or name not in PROTOCOLS:
            raise ValueError(
                f"{what}: {item!r} is not PROTOCOL://host:port with PROTOCOL one of {', '.join(PROTOCOLS)}"
            )
        host, colon, port = rest.rpartition(":")
        if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"{what}: {item!r} has no valid port")
        host = host.strip("[]")  # [::1]:9092
        if any(n == name for n, _, _ in out):
            raise ValueError(f"{what}: listener {name} named twice")
        out.append((name, host, int(port)))
    return out


def parse_listeners(config: AgentConfig) -> list[Listener]:
    """The listeners to bind, the first being the primary one (registered in the
    ring as the agent's address). Raises ValueError on a malformed list."""
    if not config.listeners.strip():
        return [
            Listener(
                "PLAINTEXT",
                config.host,
                config.port,
                config.advertised_host,
                config.advertised_port,
            )
        ]
    advertised = {
        n: (h, p) for n, h, p in _parse(config.advertised_listeners, "advertised_listeners")
    }
    out = []
    for name, host, port in _parse(config.listeners, "listeners"):
        a_host, a_port = advertised.pop(name, ("", 0))
        out.append(
            Listener(name, host or config.host, port, a_host or config.advertised_host, a_port)
        )
    if advertised:
        raise ValueError(f"advertised_listeners names {sorted(advertised)} that listeners does not")
    if not out:
        raise ValueError("listeners: empty list")
    return out
