"""Every registered scenario, run against Apache Kafka and Floe, compared.

A failure lists each differing path with both values; a path may differ only
if :mod:`tests.conformance.allowlist` says why.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.conformance import (  # noqa: F401  (registers the scenarios)
    sc_configs,
    sc_fetch,
    sc_groups,
    sc_list_offsets,
    sc_metadata,
    sc_offsets,
    sc_produce,
    sc_retention,
    sc_topics,
    sc_txn,
)
from tests.conformance._harness import SCENARIOS, Target, compare
from tests.conformance.allowlist import ALLOW, KNOWN

pytestmark = [pytest.mark.conformance, pytest.mark.interop, pytest.mark.timeout(120)]

_USED: set[int] = set()
_PROBED: set[bool] = set()  # test_api_probe ran (its allow-list entries count then)
_RAN: set[str] = set()
_POOL = ThreadPoolExecutor(2, thread_name_prefix="conformance")


def _run(fn: Any, t: Target) -> Any:
    try:
        return fn(t)
    except Exception as e:  # a scenario crashing on one side is itself an observation
        return {"crash": f"{type(e).__name__}: {e}"}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario(name: str, kafka_target: Target, floe_target: Target) -> None:
    fn = SCENARIOS[name]
    fk, ff = _POOL.submit(_run, fn, kafka_target), _POOL.submit(_run, fn, floe_target)
    kafka, floe = fk.result(), ff.result()
    assert not (isinstance(kafka, dict) and "crash" in kafka), f"scenario fails on Kafka itself: {kafka}"
    diffs = compare(name, kafka, floe)
    _RAN.add(name)
    for d in diffs:
        if d.allow is not None:
            _USED.add((ALLOW + KNOWN).index(d.allow))
    bad = [d for d in diffs if d.allow is None]
    assert not bad, f"{name}: Floe differs from Kafka:\n" + "\n".join(
        f"  {d.path}: kafka={d.kafka!r} floe={d.floe!r}" for d in bad
    )


def test_allowlist_entries_are_used() -> None:
    """Every allow-list entry still excuses a difference (after a full run)."""
    if _RAN != set(SCENARIOS):
        pytest.skip("only meaningful after every scenario ran")
    unused = [
        a for i, a in enumerate(ALLOW + KNOWN)
        if i not in _USED and (a.scenario != "api_version_probe" or _PROBED)
    ]  # fmt: skip
    assert not unused, f"allow-list entries no longer needed: {unused}"
