"""Listener parsing (agent.security.listeners) and per-listener advertised endpoints."""

from __future__ import annotations

import pytest

from agent.cluster.ring import Peer
from agent.config import AgentConfig
from agent.security.listeners import Listener, parse_listeners


def test_no_listeners_is_one_plaintext_listener_as_before() -> None:
    cfg = AgentConfig(host="0.0.0.0", port=9092, advertised_host="b1", advertised_port=19092)
    assert parse_listeners(cfg) == [Listener("PLAINTEXT", "0.0.0.0", 9092, "b1", 19092)]


def test_several_listeners_and_advertised() -> None:
    cfg = AgentConfig(
        listeners="PLAINTEXT://0.0.0.0:9092, sasl_ssl://:9094,SSL://[::1]:9093",
        advertised_listeners="SASL_SSL://kafka.example.com:443",
        advertised_host="10.0.0.5",
    )
    got = parse_listeners(cfg)
    assert got == [
        Listener("PLAINTEXT", "0.0.0.0", 9092, "10.0.0.5", 0),
        Listener("SASL_SSL", "0.0.0.0", 9094, "kafka.example.com", 443),
        Listener("SSL", "::1", 9093, "10.0.0.5", 0),
    ]
    assert [(x.tls, x.sasl) for x in got] == [(False, False), (True, True), (True, False)]


@pytest.mark.parametrize(
    ("listeners", "advertised", "error"),
    [
        ("HTTP://0.0.0.0:80", "", "PROTOCOL://host:port"),
        ("PLAINTEXT://0.0.0.0", "", "no valid port"),
        ("PLAINTEXT://:1,PLAINTEXT://:2", "", "named twice"),
        ("PLAINTEXT://:1", "SSL://x:2", "that listeners does not"),
    ],
)
def test_bad_listener_lists_are_refused(listeners: str, advertised: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_listeners(AgentConfig(listeners=listeners, advertised_listeners=advertised))


def test_peer_endpoint_per_listener() -> None:
    p = Peer(
        "a",
        "10.0.0.1",
        9092,
        "z",
        None,
        None,
        "PLAINTEXT://10.0.0.1:9092,SASL_SSL://b.example:9094",
    )
    assert p.endpoint("SASL_SSL") == ("b.example", 9094)
    assert p.endpoint("PLAINTEXT") == ("10.0.0.1", 9092)
    assert p.endpoint("SSL") == ("10.0.0.1", 9092)  # unknown listener: the primary address
    assert Peer("b", "h", 1, None, None).endpoint("SASL_SSL") == ("h", 1)


def test_floe_dev_sasl_tls_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`floe dev --sasl --tls`: SASL_PLAINTEXT, SSL and SASL_SSL beside PLAINTEXT, a
    printed dev user, a self-signed cert in the data dir that the agent config accepts."""
    import ssl

    from floe_cli.dev_security import DEV_USER, dev_security

    kw: dict[str, object] = {"host": "127.0.0.1", "port": 9092}
    lines = dev_security(kw, tmp_path, sasl=True, tls=True)
    assert kw["listeners"] == (
        "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093,SSL://127.0.0.1:9094,SASL_SSL://127.0.0.1:9095"
    )
    password = str(kw["sasl_users"]).split(":", 1)[1]
    assert f"sasl.username={DEV_USER} sasl.password={password}" in lines[0]
    cfg = AgentConfig(**kw)  # type: ignore[arg-type]
    assert [x.name for x in parse_listeners(cfg)] == ["PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"]
    ctx = ssl.create_default_context(cafile=cfg.ssl_certfile)  # the self-signed cert verifies as its own CA
    ctx.load_cert_chain(cfg.ssl_certfile, cfg.ssl_keyfile)
    plain: dict[str, object] = {}
    assert dev_security(plain, tmp_path, sasl=False, tls=False) == []
    assert plain == {"listeners": "PLAINTEXT://127.0.0.1:9092"}
