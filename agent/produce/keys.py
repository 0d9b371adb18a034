"""Object keys of what the produce pipeline writes: sealed segments and journal
objects (:mod:`agent.produce.append`) and consolidated objects
(:mod:`agent.produce.consolidate`) are named the same way."""

from __future__ import annotations

import os
import time


def object_key(prefix: str, agent_id: str, seq: str) -> str:
    """A new object's key: time-ordered, unique, and spread over prefixes by the random tail."""
    ms = time.time_ns() // 1_000_000
    return f"{prefix}{ms:013d}-{agent_id[:12]}-{seq}-{os.urandom(6).hex()}"
