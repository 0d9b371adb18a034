"""The slow-agent nemesis of ``loadtest run --slow-agent I:START:SECONDS`` (issue 43).

Where it sits: :func:`loadtest.run.run` starts the cluster with ``--agents N``
and ``FLOE_DEBUG_FAULTS`` on, then calls :meth:`SlowAgents.tick` from its
progress loop with the run time (warm-up included). At ``START`` agent ``I``
(0-based, in start order) gets ``POST /debug/delay?ms=<--slow-agent-ms>`` on
its admin port (:mod:`agent.faults`: every Kafka request it serves is answered
that much later); at ``START + SECONDS`` the delay goes back to 0. Several
``--slow-agent`` flags slow several agents (the "2 of 3 slow" case).

Every second it also reads ``floe_agent_isolated`` from every agent's
``/metrics`` (served outside the Kafka dispatcher, so not delayed), and the
result records when each fault ran and when each agent saw which agents
isolated: :meth:`SlowAgents.summary` goes to ``result["slowAgents"]``.
"""

from __future__ import annotations

import math
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_ISOLATED = re.compile(r'^floe_agent_isolated\{agent="([^"]+)"\} ([0-9.e+-]+)$', re.M)


@dataclass
class _Fault:
    index: int
    start_s: float
    seconds: float
    on_at_s: float | None = None
    off_at_s: float | None = None


def parse_slow(spec: str) -> tuple[int, float, float]:
    """``I:START:SECONDS`` -> (agent index, start s, length s)."""
    index, start, length = spec.split(":")
    return int(index), float(start), float(length)


@dataclass
class SlowAgents:
    admin_urls: list[str]  # one per agent, in start order
    agent_ids: list[str]  # the agent ids (as in floe_agent_isolated's label)
    specs: list[str]
    delay_ms: int = 2000
    say: Callable[[str], Any] = print
    faults: list[_Fault] = field(default_factory=list)
    # per observing agent index: [(run time s, sorted isolated agent ids)] on each change
    timeline: dict[int, list[tuple[float, list[str]]]] = field(default_factory=dict)
    _polled_at: float = -1.0

    def __post_init__(self) -> None:
        for spec in self.specs:
            i, start, length = parse_slow(spec)
            if not 0 <= i < len(self.admin_urls):
                raise SystemExit(
                    f"--slow-agent {spec}: agent index {i} out of 0..{len(self.admin_urls) - 1}"
                )
            self.faults.append(_Fault(i, start, length))

    def _delay(self, i: int, ms: int) -> None:
        req = urllib.request.Request(f"{self.admin_urls[i]}/debug/delay?ms={ms}", method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            r.read()

    def tick(self, now_s: float) -> None:
        for f in self.faults:
            if f.on_at_s is None and f.start_s <= now_s < f.start_s + f.seconds:
                self._delay(f.index, self.delay_ms)
                f.on_at_s = round(now_s, 2)
                self.say(f"agent {f.index} slowed by {self.delay_ms} ms at {now_s:.1f} s")
            elif f.on_at_s is not None and f.off_at_s is None and now_s >= f.start_s + f.seconds:
                self._delay(f.index, 0)
                f.off_at_s = round(now_s, 2)
                self.say(f"agent {f.index} back to normal at {now_s:.1f} s")
        if now_s - self._polled_at >= 1.0:
            self._polled_at = now_s
            self._poll(now_s)

    def _poll(self, now_s: float) -> None:
        for i, url in enumerate(self.admin_urls):
            try:
                with urllib.request.urlopen(f"{url}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except Exception:
                continue
            isolated = sorted(a for a, v in _ISOLATED.findall(text) if float(v) > 0)
            seen = self.timeline.setdefault(i, [])
            if not seen or seen[-1][1] != isolated:
                seen.append((round(now_s, 2), isolated))
                if seen[1:] or isolated:
                    self.say(f"agent {i} sees isolated: {isolated or 'none'} at {now_s:.1f} s")

    def stop(self) -> None:
        """Undo every delay still on (the run ended or failed)."""
        for f in self.faults:
            if f.on_at_s is not None and f.off_at_s is None:
                try:
                    self._delay(f.index, 0)
                except Exception:
                    pass

    def summary(self, result: dict[str, Any] | None = None) -> dict[str, Any]:
        """When the faults ran, when the others isolated the slow agent, and the
        publish p99 per interval before the first fault and from 10 s into each."""
        out: dict[str, Any] = {"delay_ms": self.delay_ms, "faults": []}
        for f in self.faults:
            slow_id = self.agent_ids[f.index]
            first = None  # when every other agent saw it isolated, after it was slowed
            if f.on_at_s is not None:
                times = []
                for i, seen in self.timeline.items():
                    if i == f.index:
                        continue
                    hit = [t for t, iso in seen if t >= f.on_at_s and slow_id in iso]
                    times.append(hit[0] if hit else None)
                if times and all(t is not None for t in times):
                    first = max(t for t in times if t is not None)
            out["faults"].append({
                "agent_index": f.index, "agent_id": slow_id, "start_s": f.start_s, "seconds": f.seconds,
                "on_at_s": f.on_at_s, "off_at_s": f.off_at_s,
                "isolated_by_all_others_at_s": first,
                "isolated_after_s": None if first is None or f.on_at_s is None else round(first - f.on_at_s, 2),
                "publish_p99_ms_from_10s": _p99s(result, (f.on_at_s or 0) + 10, f.off_at_s or 1e9),
            })  # fmt: skip
        ons = [f.on_at_s for f in self.faults if f.on_at_s is not None]
        if ons and result is not None:
            warm = [t for t, w in zip(result["timeSeconds"], result["warmup"], strict=True) if w]
            # after warm-up when the fault leaves some steady intervals before it, else from 0
            out["publish_p99_ms_before"] = _p99s(
                result, warm[-1] if warm else 0.0, min(ons)
            ) or _p99s(result, 0.0, min(ons))
        out["isolated_timeline"] = {
            self.agent_ids[i]: seen for i, seen in sorted(self.timeline.items())
        }
        return out


def _p99s(result: dict[str, Any] | None, start_s: float, end_s: float) -> dict[str, Any] | None:
    """Per-interval publish p99 of the intervals ending in (start_s, end_s]: median and max."""
    if result is None:
        return None
    got = sorted(
        v
        for t, v in zip(result["timeSeconds"], result.get("publishLatency99pct", []), strict=False)
        if start_s < t <= end_s and v and not math.isnan(v)
    )
    if not got:
        return None
    return {"intervals": len(got), "median": got[len(got) // 2], "max": got[-1]}
