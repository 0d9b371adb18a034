"""SCRAM-SHA-256 / SCRAM-SHA-512 server (RFC 5802, RFC 7677) over metastore credentials.

Sits under SaslAuthenticate: two rounds. The client-first message
``n,,n=user,r=cnonce`` is answered ``r=cnonce+snonce,s=salt,i=iterations``
from the user's stored credential (metastore ``scram_credentials``: salt,
StoredKey, ServerKey; never the password); the client-final message
``c=biws,r=nonce,p=proof`` is checked (ClientKey = proof XOR
HMAC(StoredKey, AuthMessage); H(ClientKey) == StoredKey with
hmac.compare_digest) and answered ``v=ServerSignature``. Channel binding is
not supported (gs2 flag ``n`` or ``y``), as in Kafka.

An unknown user must be indistinguishable from a known one until the proof
fails (like a wrong password): its server-first message carries the default
iteration count (that of ``floe users add``) and a 32-byte salt, like Floe's
own credentials, that is stable per user name and mechanism (HMAC of a server
secret, so an attacker can neither precompute it nor see it change between
attempts, agents or restarts when the secret is shared).

Also the credential maths for AlterUserScramCredentials and ``floe users``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from agent.security.principal import KafkaPrincipal
from agent.security.sasl import AuthenticationFailed, SaslServer, invalid_credentials
from metastore.types import ScramCredential

if TYPE_CHECKING:
    from metastore import Metastore

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's lower bound
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 8192  # floe users add's default; also what an unknown user is told
_MAX_MESSAGE = 4096


def _hmac(alg: str, key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, alg).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 Hi(): PBKDF2 with the mechanism's hash."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def credential_from_salted(
    user: str, mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    alg = HASHES[mechanism]
    client_key = _hmac(alg, salted, b"Client Key")
    stored_key = hashlib.new(alg, client_key).digest()
    server_key = _hmac(alg, salted, b"Server Key")
    return ScramCredential(user, mechanism, salt, stored_key, server_key, iterations)


def make_credential(
    user: str, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    salt = os.urandom(32)
    return credential_from_salted(
        user, mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
    )


def _attrs(msg: str) -> list[tuple[str, str]]:
    out = []
    for part in msg.split(","):
        key, eq, value = part.partition("=")
        if not eq or len(key) != 1:
            raise ValueError(f"malformed attribute {part[:20]!r}")
        out.append((key, value))
    return out


def _username(raw: str) -> str:
    # RFC 5802: "=2C" is ",", "=3D" is "="; any other "=" is invalid.
    out = raw.replace("=2C", ",").replace("=3D", "=")
    if "=" in raw.replace("=2C", "").replace("=3D", ""):
        raise ValueError("invalid escape in user name")
    return out


def fake_salt_secret(*candidates: str) -> bytes:
    """The key of unknown users' fake salts: the first non-empty candidate (a
    deployment secret every agent shares: the peer or internal token, else the
    metastore URL, which holds the database password), hashed for domain
    separation; random per process when all are empty."""
    for c in candidates:
        if c:
            return hashlib.sha256(b"floe-scram-fake-salt\0" + c.encode()).digest()
    return _PROCESS_SECRET


_PROCESS_SECRET = os.urandom(32)


def fake_salt(secret: bytes, mechanism: str, user: str) -> bytes:
    """A stable salt for an unknown ``user``, unpredictable without ``secret``."""
    return hmac.new(secret, f"{mechanism}\0{user}".encode(), "sha256").digest()


class ScramServer:
    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], object],
        secret: bytes = b"",
        default_iterations: int = DEFAULT_ITERATIONS,
    ) -> None:
        self.mechanism = mechanism
        self._secret = secret or _PROCESS_SECRET
        self._default_iterations = default_iterations
        self._alg = HASHES[mechanism]
        self._lookup = lookup
        self._state = 0  # 0: want client-first, 1: want client-final, 2: done
        self.principal: KafkaPrincipal | None = None
        self.expires_at_ms: int | None = None
        self._user = ""
        self._cred: ScramCredential | None = None
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self.principal is not None

    def _fail(self, reason: str) -> AuthenticationFailed:
        self._state = 3
        return invalid_credentials(self.mechanism, reason, self._user)

    async def step(self, token: bytes) -> bytes:
        if len(token) > _MAX_MESSAGE:
            raise self._fail(f"SCRAM message of {len(token)} bytes")
        try:
            msg = token.decode()
        except UnicodeDecodeError:
            raise self._fail("SCRAM message is not UTF-8") from None
        if self._state == 0:
            return await self._client_first(msg)
        if self._state == 1:
            return self._client_final(msg)
        raise self._fail("SCRAM message after the exchange ended")

    async def _client_first(self, msg: str) -> bytes:
        flag, _, rest = msg.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise self._fail("bad gs2 header (channel binding is not supported)")
        try:
            attrs = _attrs(bare)
            if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
                raise ValueError("client-first-message needs n= and r=")
            user = _username(attrs[0][1])
        except ValueError as e:
            raise self._fail(f"malformed client-first-message: {e}") from None
        if authzid and _username(authzid[2:]) != user:
            raise self._fail("authorization id differs from the user name")
        self._user = user
        self._gs2 = f"{flag},{authzid},"
        self._client_first_bare = bare
        cred = await self._lookup(user)  # type: ignore[misc]
        self._cred = cred if isinstance(cred, ScramCredential) else None
        if self._cred is not None:
            salt, iterations = self._cred.salt, self._cred.iterations
        else:
            salt = fake_salt(self._secret, self.mechanism, user)
            iterations = self._default_iterations
        self._nonce = attrs[1][1] + secrets.token_hex(16)  # alphanumeric, like Kafka's
        self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        self._state = 1
        return self._server_first.encode()

    def _client_final(self, msg: str) -> bytes:
        without_proof, sep, proof_part = msg.rpartition(",p=")
        try:
            if not sep:
                raise ValueError("no proof")
            attrs = dict(_attrs(without_proof))
            proof = base64.b64decode(proof_part, validate=True)
            binding = base64.b64decode(attrs.get("c", ""), validate=True)
        except (ValueError, TypeError) as e:
            raise self._fail(f"malformed client-final-message: {e}") from None
        if binding.decode(errors="replace") != self._gs2:
            raise self._fail("channel binding does not match")
        # Kafka checks endsWith (old librdkafka, e.g. kcat's, sends client nonce + our whole r).
        if not attrs.get("r", "").endswith(self._nonce):
            raise self._fail("nonce does not match")
        if self._cred is None:
            raise self._fail("unknown user")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._alg, self._cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise self._fail("bad proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(
            hashlib.new(self._alg, client_key).digest(), self._cred.stored_key
        ):
            raise self._fail("wrong password")
        server_signature = _hmac(self._alg, self._cred.server_key, auth_message)
        self._state = 2
        self.principal = KafkaPrincipal("User", self._user)
        return b"v=" + base64.b64encode(server_signature)


def scram_factories(
    meta: Metastore, mechanisms: tuple[str, ...], secret: bytes = b""
) -> dict[str, Callable[[], SaslServer]]:
    """One server factory per enabled SCRAM mechanism; ``secret`` keys the fake
    salts of unknown users (:func:`fake_salt_secret`)."""

    def factory(mechanism: str) -> Callable[[], SaslServer]:
        async def lookup(user: str) -> ScramCredential | None:
            return await meta.get_scram_credential(user, mechanism)

        return lambda: ScramServer(mechanism, lookup, secret)

    return {m: factory(m) for m in mechanisms if m in HASHES}
