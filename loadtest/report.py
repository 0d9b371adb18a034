"""Turn interval snapshots from the driver processes into an OMB-style result, and plot it."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from hdrh.histogram import HdrHistogram

from loadtest.driver import new_hist

PCTS = [("50pct", 50.0), ("75pct", 75.0), ("95pct", 95.0), ("99pct", 99.0), ("999pct", 99.9),
        ("9999pct", 99.99)]
LAT_KINDS = [("publishLatency", "pub"), ("publishDelayLatency", "delay"), ("endToEndLatency", "e2e")]


def _ms(us: float) -> float:
    return round(us / 1000.0, 3)


def hist_stats(h: HdrHistogram) -> dict[str, float]:
    if h.get_total_count() == 0:
        return {"Avg": math.nan, **{n: math.nan for n, _ in PCTS}, "Max": math.nan}
    out = {"Avg": _ms(h.get_mean_value())}
    for name, p in PCTS:
        out[name] = _ms(h.get_value_at_percentile(p))
    out["Max"] = _ms(h.get_max_value())
    return out


class Collector:
    """Accumulates per-interval counters and histograms from every process."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.counts: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.hists: dict[int, dict[str, HdrHistogram]] = defaultdict(dict)
        self.total_acked_bytes = 0
        self.total_received_bytes = 0
        self.finals: set[str] = set()
        self.errors: list[str] = []

    def add(self, msg: dict[str, Any]) -> None:
        k = int(msg["k"])
        c = self.counts[k]
        if msg["kind"] == "p":
            for f in ("sent", "sent_bytes", "acked", "acked_bytes", "errors"):
                c[f] += msg[f]
            self.total_acked_bytes += msg["acked_bytes"]
            self._merge(k, "pub", msg["pub"])
            self._merge(k, "delay", msg["delay"])
        else:
            c["received"] += msg["received"]
            c["received_bytes"] += msg["received_bytes"]
            c["consume_errors"] += msg["errors"]
            self.total_received_bytes += msg["received_bytes"]
            self._merge(k, "e2e", msg["e2e"])
        if msg.get("final"):
            self.finals.add(msg["id"])

    def _merge(self, k: int, name: str, encoded: Any) -> None:
        h = HdrHistogram.decode(encoded)
        if h.get_total_count() == 0:
            return
        if name not in self.hists[k]:
            self.hists[k][name] = new_hist()
        self.hists[k][name].add(h)

    def last_complete(self) -> int:
        return max(self.counts) - 1 if self.counts else -1

    def build(self, warmup: float, test: float, subscriptions: int, message_size: int) -> dict[str, Any]:
        """OMB TestResult fields: per-interval series (all intervals, warm-up included,
        with ``timeSeconds`` and ``warmup`` flags) and aggregated values (steady state)."""
        last = max(self.counts) if self.counts else -1
        ks = list(range(last + 1))
        iv = self.interval
        res: dict[str, Any] = defaultdict(list)
        acked_cum = recv_cum = 0
        for k in ks:
            c = self.counts.get(k, {})
            acked_cum += c.get("acked", 0)
            recv_cum += c.get("received", 0)
            res["timeSeconds"].append(round((k + 1) * iv, 3))
            res["warmup"].append(k * iv < warmup)
            res["publishRate"].append(c.get("acked", 0) / iv)
            res["publishErrorRate"].append(c.get("errors", 0) / iv)
            res["consumeRate"].append(c.get("received", 0) / iv)
            res["backlog"].append(acked_cum * subscriptions - recv_cum)
            res["publishMBps"].append(c.get("acked_bytes", 0) / iv / 1e6)
            res["consumeMBps"].append(c.get("received_bytes", 0) / iv / 1e6)
            for omb, short in LAT_KINDS:
                st = hist_stats(self.hists.get(k, {}).get(short, new_hist()))
                for name, v in st.items():
                    res[f"{omb}{name}"].append(v)
        # Steady state: intervals that start after warm-up and end by the test's end; the
        # last (final) interval also holds the acknowledgements flushed after the end.
        steady = [k for k in ks if k * iv >= warmup - 1e-9 and (k + 1) * iv <= warmup + test + 1e-9]
        if not steady:
            steady = ks
        agg = {name: new_hist() for _, name in LAT_KINDS}
        tot: dict[str, int] = defaultdict(int)
        for k in steady:
            for name, h in self.hists.get(k, {}).items():
                agg[name].add(h)
            for f, v in self.counts.get(k, {}).items():
                tot[f] += v
        span = len(steady) * iv
        out: dict[str, Any] = dict(res)
        for omb, short in LAT_KINDS:
            for name, v in hist_stats(agg[short]).items():
                out[f"aggregated{omb[0].upper()}{omb[1:]}{name}"] = v
        out["aggregatedPublishRate"] = tot["acked"] / span if span else 0.0
        out["aggregatedConsumeRate"] = tot["received"] / span if span else 0.0
        out["aggregatedPublishMBps"] = tot["acked_bytes"] / span / 1e6 if span else 0.0
        out["aggregatedConsumeMBps"] = tot["received_bytes"] / span / 1e6 if span else 0.0
        out["aggregatedSendRate"] = tot["sent"] / span if span else 0.0
        out["aggregatedPublishErrors"] = tot["errors"]
        out["aggregatedConsumeErrors"] = tot["consume_errors"]
        out["steadyStateSeconds"] = span
        out["totalMessagesPublished"] = sum(c.get("acked", 0) for c in self.counts.values())
        out["totalMessagesReceived"] = sum(c.get("received", 0) for c in self.counts.values())
        out["finalBacklog"] = res["backlog"][-1] if res["backlog"] else 0
        return out


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = result["timeSeconds"]
    fig, axes = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    ax = axes[0]
    ax.plot(t, result["publishMBps"], label="publish MB/s")
    ax.plot(t, result["consumeMBps"], label="consume MB/s")
    ax.set_ylabel("MB/s")
    ax2 = ax.twinx()
    ax2.plot(t, result["backlog"], color="grey", linestyle=":", label="backlog (msgs)")
    ax2.set_ylabel("backlog (messages)")
    ax.legend(loc="upper left")
    ax.set_title(
        f"{result['workload']['name']} on {result['config']['backend']}"
        f" (flush {result['config']['flush_interval_ms']} ms,"
        f" idempotent={result['config']['idempotent']})"
    )
    for ax, prefix, title in (
        (axes[1], "publishLatency", "publish latency (ms)"),
        (axes[2], "endToEndLatency", "end-to-end latency (ms)"),
    ):
        for pct in ("50pct", "99pct", "999pct", "Max"):
            ax.plot(t, result[f"{prefix}{pct}"], label=pct)
        if prefix == "publishLatency":
            ax.plot(t, result["publishDelayLatency99pct"], label="publishDelay 99pct", linestyle="--")
        ax.set_ylabel(title)
        ax.set_yscale("log")
        ax.legend(loc="upper left", fontsize="small")
    warm = result["workload"]["warmupDurationMinutes"] * 60
    for ax in axes:
        if warm:
            ax.axvspan(0, warm, color="grey", alpha=0.1)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("seconds since start")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
