"""The slow-agent nemesis of ``loadtest run --slow-agent`` (issue 43): the delay is
switched on and off on time through the admin hook, and the result says when the
other agents isolated the slow one and what publish p99 clients saw."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from loadtest.slow_agent import SlowAgents, parse_slow


class _Admin:
    """A fake agent admin port: records /debug/delay, serves a canned /metrics."""

    def __init__(self) -> None:
        self.delays: list[str] = []
        self.isolated: list[str] = []
        me = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                me.delays.append(self.path.split("ms=")[1])
                self._answer(b"{}")

            def do_GET(self) -> None:
                lines = [f'floe_agent_isolated{{agent="{a}"}} 1.0' for a in me.isolated]
                self._answer("\n".join(["# HELP x", *lines, ""]).encode())

            def _answer(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_slow_agent_on_off_and_summary() -> None:
    admins = [_Admin() for _ in range(3)]
    try:
        slow = SlowAgents(
            [a.url for a in admins], ["1", "2", "3"], ["1:5:10"], 2000, say=lambda _: None
        )
        slow.tick(1.0)
        slow.tick(5.5)  # on
        for a in (admins[0], admins[2]):
            a.isolated = ["2"]
        slow.tick(8.0)
        slow.tick(15.6)  # off
        for a in admins:
            a.isolated = []
        slow.tick(17.0)
        assert admins[1].delays == ["2000", "0"] and admins[0].delays == admins[2].delays == []
        result = {
            "timeSeconds": [float(t) for t in range(1, 17)],
            "warmup": [t < 2 for t in range(1, 17)],
            "publishLatency99pct": [50.0] * 5 + [2100.0] * 2 + [60.0] * 9,
        }
        s = slow.summary(result)
        fault = s["faults"][0]
        assert (fault["on_at_s"], fault["off_at_s"], fault["isolated_after_s"]) == (5.5, 15.6, 2.5)
        assert s["publish_p99_ms_before"]["max"] == 50.0
        assert fault["publish_p99_ms_from_10s"] is None  # 15.5 .. 15.6: no whole interval
        assert s["isolated_timeline"]["1"] == [(1.0, []), (8.0, ["2"]), (17.0, [])]
    finally:
        for a in admins:
            a.server.shutdown()


def test_bad_specs_are_refused() -> None:
    assert parse_slow("2:30:60") == (2, 30.0, 60.0)
    with pytest.raises(SystemExit):
        SlowAgents(["http://x"], ["1"], ["3:0:1"])
