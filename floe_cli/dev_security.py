"""`floe dev --sasl` / `floe dev --tls`: try SASL and TLS on one machine.

``--sasl`` adds a SASL_PLAINTEXT listener (Kafka port + 1) with a PLAIN dev user
whose password is generated and printed; ``--tls`` adds an SSL listener (Kafka
port + 2) with a self-signed certificate for localhost/127.0.0.1 generated with
``cryptography`` into the data directory (kept across restarts); both together
add SASL_SSL (port + 3) too. The PLAINTEXT listener stays as before.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from pathlib import Path
from typing import Any

DEV_USER = "floe-dev"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """``directory/dev-cert.pem`` + ``dev-key.pem`` (created once, valid a year)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    cert_path, key_path = directory / "dev-cert.pem", directory / "dev-key.pem"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def dev_security(kw: dict[str, Any], data: Path, *, sasl: bool, tls: bool) -> list[str]:
    """Add the listeners and settings to ``kw``; return lines to print."""
    host = kw.get("host", "127.0.0.1")
    port = int(kw.get("port", 9092))
    listeners = [f"PLAINTEXT://{host}:{port}"]
    lines = []
    if sasl:
        password = secrets.token_urlsafe(12)
        kw["sasl_users"] = f"{DEV_USER}:{password}"
        kw["sasl_mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
        listeners.append(f"SASL_PLAINTEXT://{host}:{port + 1}")
        lines.append(
            f"SASL_PLAINTEXT on {host}:{port + 1}: sasl.mechanism=PLAIN sasl.username={DEV_USER}"
            f" sasl.password={password}  (SCRAM users: floe users add NAME --metastore ...)"
        )
    if tls:
        cert, key = self_signed(data / "tls")
        kw["ssl_certfile"], kw["ssl_keyfile"] = str(cert), str(key)
        listeners.append(f"SSL://{host}:{port + 2}")
        lines.append(f"SSL on {host}:{port + 2}: ssl.ca.location={cert}")
        if sasl:
            listeners.append(f"SASL_SSL://{host}:{port + 3}")
            lines.append(
                f"SASL_SSL on {host}:{port + 3}: the dev user above, ssl.ca.location={cert}"
            )
    kw["listeners"] = ",".join(listeners)
    return lines
