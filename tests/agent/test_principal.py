"""KafkaPrincipal: the identity authentication sets and the authorizer checks."""

import pytest

from agent.security.principal import ANONYMOUS, KafkaPrincipal


def test_parse_and_str_round_trip() -> None:
    p = KafkaPrincipal.parse("User:alice")
    assert p == KafkaPrincipal("User", "alice")
    assert str(p) == "User:alice"
    assert str(ANONYMOUS) == "User:ANONYMOUS"


@pytest.mark.parametrize("bad", ["alice", ":alice", "User:", ""])
def test_parse_refuses_malformed(bad: str) -> None:
    with pytest.raises(ValueError, match="Type:name"):
        KafkaPrincipal.parse(bad)
