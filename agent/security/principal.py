"""The authenticated identity of a connection, as Kafka names it ("User:alice").

Sits between the connection layer (which sets it after TLS client-certificate
or SASL authentication) and the authorizer (which checks it against ACLs).
A connection starts as :data:`ANONYMOUS`; a PLAINTEXT listener keeps it so.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """Kafka's principal: a type (always ``User`` here) and a name."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``"User:alice"`` -> KafkaPrincipal("User", "alice"); raises ValueError without a type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"principal {text!r} is not of the form Type:name")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
