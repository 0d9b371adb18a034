"""The test fixture that runs `floe agent` processes (tests/fixtures/agent_process.py):
a port taken between free_port() and the agent's bind (another test process on a
shared box) gives the agent new ports on its first start instead of failing the
test; a restart keeps its ports (clients know them)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.fixtures.agent_process import AgentProcess, _sqlite_file


def test_first_start_moves_off_a_taken_port(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    agent = AgentProcess(_sqlite_file(tmp_path / "b"), tmp_path / "agent.log", port=port)
    try:
        agent.start()
        assert agent.port != port and agent.healthz() is not None
        assert "address already in use" in agent.log_text()
        moved = agent.port
        agent.stop()
        with socket.socket() as s2:  # a restart on a taken port fails: it keeps its port
            s2.bind(("127.0.0.1", moved))
            s2.listen()
            with pytest.raises(RuntimeError, match="address already in use"):
                agent.start()
            assert agent.port == moved
    finally:
        agent.kill()
        taken.close()
