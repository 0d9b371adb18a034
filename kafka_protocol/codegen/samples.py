"""Schema-driven sample instances of the generated message classes.

Where it sits: test and benchmark support (the differential tests against
kafka-python, the fuzz tests). Given a message name and a version, it fills
every field that exists in that version with a random, non-default value, so
each field's encoding is exercised; fields outside the version keep their
defaults, so ``decode(encode(x)) == x`` holds.
"""

from __future__ import annotations

import importlib
import random
import uuid
from typing import Any

from .schema import Field, Message, Struct, load_message

_INT_RANGES = {
    "int8": (-128, 127),
    "int16": (-32768, 32767),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 65535),
    "uint32": (0, 2**32 - 1),
}


def message_class(name: str) -> Any:
    return getattr(importlib.import_module("kafka_protocol.messages"), name)


def struct_class(s: Struct) -> Any:
    obj = message_class(s.path[0])
    for part in s.path[1:]:
        obj = getattr(obj, part)
    return obj


class Sampler:
    """Build random instances. ``null_ratio`` > 0 makes nullable fields None sometimes."""

    def __init__(self, rng: random.Random, null_ratio: float = 0.0, max_items: int = 2) -> None:
        self.rng = rng
        self.null_ratio = null_ratio
        self.max_items = max_items

    def message(self, m: Message | str, version: int) -> Any:
        if isinstance(m, str):
            m = load_message(m)
        self.flexible = m.flexible is not None and m.flexible[0] <= version <= m.flexible[1]
        return self.struct(m.root, version)

    def struct(self, s: Struct, v: int) -> Any:
        kwargs = {}
        for f in s.fields:
            if not f.present(v):
                continue
            if f.tag is not None and not self.flexible and f.versions == f.tagged:
                continue  # tagged-only field in a non-flexible version: not on the wire
            kwargs[f.attr] = self.field(f, v)
        return struct_class(s)(**kwargs)

    def field(self, f: Field, v: int) -> Any:
        if f.is_nullable(v) and self.rng.random() < self.null_ratio:
            return None
        if f.is_array:
            n = self.rng.randint(1, self.max_items)
            return [self.value(f, v) for _ in range(n)]
        return self.value(f, v)

    def value(self, f: Field, v: int) -> Any:
        rng = self.rng
        if f.struct is not None:
            return self.struct(f.struct, v)
        t = f.type
        if t in _INT_RANGES:
            lo, hi = _INT_RANGES[t]
            default = int(f.default, 0) if f.default and f.default != "null" else 0
            x = rng.randint(lo, hi)
            return x if x != default else x ^ 1
        if t == "bool":
            return f.default != "true"
        if t == "float64":
            return rng.uniform(-1e6, 1e6)
        if t == "string":
            return f"{f.attr}-" + "".join(rng.choice("abcxyzé€") for _ in range(rng.randint(1, 8)))
        if t in ("bytes", "records"):
            return rng.randbytes(rng.randint(1, 24))
        if t == "uuid":
            return uuid.UUID(int=rng.getrandbits(128) | 1)
        raise ValueError(t)
