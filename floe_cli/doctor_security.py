"""`floe doctor`'s security checks: listeners, TLS material, SASL, JWKS, internal tokens.

Sits beside floe_cli.doctor (which runs the metastore and object store checks and
prints every line): each function here takes the agent's configuration as it
will run (flags and ``FLOE_*`` variables) and returns ``(check, status,
detail)`` lines, status ``ok``, ``WARN`` (works, but a reviewer would object, or
soon will not: a certificate expiring within 14 days) or ``FAIL`` (the agent
will not start, or clients cannot connect or log in). It reads the same
settings the agent reads (agent.security.listeners, agent.security.tls,
agent.security.setup), so a configuration that passes here is the one that runs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import socket
import ssl
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.config import AgentConfig
    from metastore import Metastore

Check = tuple[str, str, str]
OK, WARN, FAIL = "ok", "WARN", "FAIL"
EXPIRY_WARN_DAYS = 14
MIN_TOKEN_CHARS = 16


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text and text[0] else type(e).__name__


def listener_checks(cfg: AgentConfig) -> list[Check]:
    """Every configured listener (not a fixed 9092) and the admin port can be bound."""
    from agent.security.listeners import parse_listeners

    try:
        listeners = parse_listeners(cfg)
    except ValueError as e:
        return [("listeners", FAIL, _one_line(e))]
    ports = [(f"{lst.name} listener", lst.host, lst.port) for lst in listeners]
    if cfg.admin_port:
        ports.append(("admin listener", cfg.admin_host or cfg.host, cfg.admin_port))
    out: list[Check] = []
    seen: dict[int, str] = {}
    for name, host, port in ports:
        if not port:
            out.append((name, OK, f"{host}:0 (any free port)"))
            continue
        if port in seen:
            out.append((name, FAIL, f"port {port} is also the {seen[port]}'s"))
            continue
        seen[port] = name
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((host, port))
            out.append((name, OK, f"{host}:{port} is free"))
        except OSError as e:
            out.append((name, FAIL, f"cannot bind {host}:{port}: {e.strerror or e} (another process uses it?)"))
    return out


def _public(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))


def tls_checks(cfg: AgentConfig, now: dt.datetime | None = None) -> list[Check]:
    """With an SSL / SASL_SSL listener: the certificate and key exist, parse, belong
    together and are valid now (WARN within 14 days of expiry); the CA file too."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from agent.security.listeners import parse_listeners

    try:
        tls = [lst.name for lst in parse_listeners(cfg) if lst.tls]
    except ValueError:
        return []  # the listeners line says why
    if not tls:
        return []
    now = now or dt.datetime.now(dt.UTC)
    if not cfg.ssl_certfile or not cfg.ssl_keyfile:
        return [("tls", FAIL, f"{', '.join(tls)} listener needs FLOE_SSL_CERTFILE and FLOE_SSL_KEYFILE")]
    try:
        with open(cfg.ssl_certfile, "rb") as f:
            certs = x509.load_pem_x509_certificates(f.read())
    except (OSError, ValueError) as e:
        return [("tls certificate", FAIL, f"{cfg.ssl_certfile}: {_one_line(e)}")]
    try:
        with open(cfg.ssl_keyfile, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
    except (OSError, ValueError, TypeError) as e:  # TypeError: an encrypted key
        return [("tls key", FAIL, f"{cfg.ssl_keyfile}: {_one_line(e)}")]
    leaf = certs[0]
    subject = leaf.subject.rfc4514_string()
    out: list[Check] = []
    if _public(leaf.public_key()) != _public(key.public_key()):
        return [("tls key", FAIL, f"{cfg.ssl_keyfile} is not the key of the certificate {subject}")]
    out.append(("tls key", OK, f"matches the certificate {subject}"))
    first = min(certs, key=lambda c: c.not_valid_after_utc)
    left = first.not_valid_after_utc - now
    when = first.not_valid_after_utc.strftime("%Y-%m-%d %H:%M UTC")
    which = "" if first is leaf else f" (chain certificate {first.subject.rfc4514_string()})"
    if any(c.not_valid_before_utc > now for c in certs):
        out.append(("tls certificate", FAIL, f"{subject} is not valid yet"))
    elif left <= dt.timedelta(0):
        out.append(("tls certificate", FAIL, f"expired on {when}{which}"))
    elif left < dt.timedelta(days=EXPIRY_WARN_DAYS):
        out.append(("tls certificate", WARN, f"expires on {when}{which}, in {left.days} day(s): renew it"))
    else:
        out.append(("tls certificate", OK, f"{subject}, valid until {when}"))
    try:  # what the agent does with them (agent.security.tls)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cfg.ssl_certfile, cfg.ssl_keyfile)
        if cfg.ssl_cafile:
            ctx.load_verify_locations(cfg.ssl_cafile)
    except (OSError, ssl.SSLError) as e:
        out.append(("tls context", FAIL, _one_line(e)))
    if cfg.ssl_client_auth != "none" and not cfg.ssl_cafile:
        out.append(("tls client auth", FAIL, f"ssl_client_auth={cfg.ssl_client_auth} needs FLOE_SSL_CAFILE"))
    return out


def _mechanisms(cfg: AgentConfig) -> tuple[list[str], list[str]]:
    from agent.security.sasl.session import ALL_MECHANISMS, parse_mechanisms

    mechs = parse_mechanisms(cfg.sasl_mechanisms)
    return [m for m in mechs if m in ALL_MECHANISMS], [m for m in mechs if m not in ALL_MECHANISMS]


def sasl_enabled(cfg: AgentConfig) -> bool:
    from agent.security.listeners import parse_listeners

    try:
        return any(lst.sasl for lst in parse_listeners(cfg))
    except ValueError:
        return False


async def sasl_checks(cfg: AgentConfig, meta: Metastore | None, timeout: float) -> list[Check]:  # noqa: ASYNC109
    """With a SASL listener: the mechanisms are known, and each one someone can log
    in with (PLAIN: sasl_users; SCRAM: credentials in the metastore; OAUTHBEARER:
    a JWKS, checked by :func:`jwks_check`). FAIL when nobody can log in at all."""
    from agent.security.sasl.plain import parse_users

    if not sasl_enabled(cfg):
        return []
    mechs, unknown = _mechanisms(cfg)
    if unknown:
        return [("sasl", FAIL, f"unknown mechanism(s) {', '.join(unknown)} in FLOE_SASL_MECHANISMS")]
    if not mechs:
        return [("sasl", FAIL, "no mechanism enabled (FLOE_SASL_MECHANISMS)")]
    out: list[Check] = []
    usable: list[str] = []
    if "PLAIN" in mechs:
        try:
            users = parse_users(cfg.sasl_users)
            if users:
                usable.append("PLAIN")
                out.append(("sasl PLAIN", OK, f"{len(users)} user(s) in FLOE_SASL_USERS"))
            else:
                out.append(("sasl PLAIN", WARN, "enabled but FLOE_SASL_USERS names no user"))
        except (OSError, ValueError) as e:
            out.append(("sasl PLAIN", FAIL, f"FLOE_SASL_USERS: {_one_line(e)}"))
    scram = [m for m in mechs if m.startswith("SCRAM-")]
    if scram:
        if meta is None:
            out.append(("sasl SCRAM", WARN, "users not counted: the metastore is not usable (see above)"))
        else:
            try:
                creds = await asyncio.wait_for(meta.list_scram_credentials(), timeout)
                for m in scram:
                    n = len({c.user for c in creds if c.mechanism == m})
                    if n:
                        usable.append(m)
                    out.append((f"sasl {m}", OK if n else WARN,
                                f"{n} user(s) in the metastore" + ("" if n else ": create one with `floe users add`")))  # fmt: skip
            except TimeoutError:
                out.append(("sasl SCRAM", FAIL, f"listing SCRAM users: no answer within {timeout:g} s"))
            except Exception as e:  # e.g. a served metastore without the admin credential
                usable.extend(scram)  # cannot tell: do not claim nobody can log in
                out.append(("sasl SCRAM", WARN, f"cannot list SCRAM users: {_one_line(e)}"))
    if "OAUTHBEARER" in mechs:
        if cfg.oauth_jwks:
            usable.append("OAUTHBEARER")
        else:
            out.append(("sasl OAUTHBEARER", WARN, "enabled but FLOE_OAUTH_JWKS is not set: not offered"))
    if not usable and not any(s == FAIL for _, s, _ in out):
        out.insert(0, ("sasl", FAIL, f"no user can log in with {', '.join(mechs)}"))
    return out


def _read_jwks(source: str, timeout: float) -> str:
    import urllib.request

    if source.startswith(("https://", "http://")):
        with urllib.request.urlopen(source, timeout=timeout) as r:  # operator-configured URL
            return str(r.read().decode())
    with open(source.removeprefix("file://")) as f:
        return f.read()


async def jwks_check(cfg: AgentConfig, timeout: float) -> list[Check]:  # noqa: ASYNC109
    """OAUTHBEARER on a SASL listener: the JWKS is reachable and holds usable keys."""
    if not sasl_enabled(cfg) or "OAUTHBEARER" not in _mechanisms(cfg)[0] or not cfg.oauth_jwks:
        return []
    import jwt

    try:
        text = await asyncio.wait_for(asyncio.to_thread(_read_jwks, cfg.oauth_jwks, timeout), timeout)
        keys = json.loads(text).get("keys", [])
        usable = [jwt.PyJWK(k) for k in keys]
    except TimeoutError:
        return [("jwks", FAIL, f"{cfg.oauth_jwks}: no answer within {timeout:g} s")]
    except Exception as e:
        return [("jwks", FAIL, f"{cfg.oauth_jwks}: {_one_line(e)}")]
    if not usable:
        return [("jwks", FAIL, f"{cfg.oauth_jwks} holds no key")]
    return [("jwks", OK, f"{cfg.oauth_jwks}: {len(usable)} key(s)")]


def token_checks(cfg: AgentConfig) -> list[Check]:
    """The internal credentials where they are needed: a served metastore needs the
    metastore token; a shared metastore (several agents) the peer token, so that
    agents on other hosts can use this one's /blocks and group relay."""
    from metastore.internal_auth import is_loopback

    url = cfg.metastore
    served = url.startswith(("http://", "https://"))
    shared = served or url.startswith("postgres")
    out: list[Check] = []
    if served:
        token = cfg.metastore_token or cfg.internal_token
        if not token:
            out.append(("metastore token", FAIL, "a served metastore needs FLOE_METASTORE_TOKEN (or FLOE_INTERNAL_TOKEN)"))
        elif url.startswith("http://") and not is_loopback(url.split("://", 1)[1].split("/")[0].rsplit(":", 1)[0].strip("[]")):
            out.append(("metastore token", WARN, "sent over plain http:// to another host: use https://"))
        else:
            out.append(("metastore token", OK, "set"))
    if shared and cfg.admin_port:
        peer = cfg.peer_token or cfg.internal_token
        if not peer and is_loopback(cfg.admin_host or cfg.host):
            out.append(("peer token", OK, "not set; the admin port listens on loopback only"))
        elif not peer:
            out.append(("peer token", WARN, "not set: agents on other hosts cannot use this agent's /blocks and"
                        " group relay (set FLOE_PEER_TOKEN, the same on every agent)"))  # fmt: skip
        elif len(peer) < MIN_TOKEN_CHARS:
            out.append(("peer token", WARN, f"only {len(peer)} characters: use {MIN_TOKEN_CHARS} or more random ones"))
        else:
            out.append(("peer token", OK, "set"))
    return out
