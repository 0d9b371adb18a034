"""Server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

Where it sits: the consumer-group coordinator (:mod:`.coordinator`) computes a
new target assignment with one of these whenever the group epoch moves past the
assignment epoch. An assignor sees only the members' subscribed topic names, the
topics (id, partition count) and the previous target assignment; it returns the
new target, ``{member id: {topic id: {partitions}}}``. Both are deterministic
(same input, same output), so a coordinator that takes a group over computes what
its predecessor would have.

``uniform`` (Kafka's default, ``UniformAssignor``): balanced and sticky. Each
member keeps what it had as long as it is still subscribed and not above its
share; the rest goes to the eligible member with the fewest partitions; then
partitions move from the fullest to the emptiest eligible member until no move
makes it better (differences of at most one for identical subscriptions).
``range`` (``RangeAssignor``): per topic, the subscribed members sorted by member
id get consecutive ranges, the first ``partitions % members`` one more.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

Assignment = dict[uuid.UUID, set[int]]


@dataclass(frozen=True, slots=True)
class TopicMeta:
    id: uuid.UUID
    name: str
    partitions: int


def _subscribed(topics: Mapping[str, TopicMeta], names: set[str]) -> list[TopicMeta]:
    return [topics[n] for n in sorted(names) if n in topics]


def range_assign(
    members: Mapping[str, set[str]], topics: Mapping[str, TopicMeta], previous: Mapping[str, Assignment]
) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {m: {} for m in members}
    for name in sorted({n for subs in members.values() for n in subs}):
        t = topics.get(name)
        if t is None or t.partitions <= 0:
            continue
        subs = sorted(m for m, s in members.items() if name in s)
        per, extra = divmod(t.partitions, len(subs))
        start = 0
        for i, m in enumerate(subs):
            n = per + (1 if i < extra else 0)
            if n:
                out[m][t.id] = set(range(start, start + n))
            start += n
    return out


def uniform_assign(
    members: Mapping[str, set[str]], topics: Mapping[str, TopicMeta], previous: Mapping[str, Assignment]
) -> dict[str, Assignment]:
    eligible: dict[tuple[uuid.UUID, int], list[str]] = {}
    for m in sorted(members):
        for t in _subscribed(topics, members[m]):
            for p in range(t.partitions):
                eligible.setdefault((t.id, p), []).append(m)
    owner: dict[tuple[uuid.UUID, int], str] = {}
    count = {m: 0 for m in members}
    if not eligible or not members:
        return {m: {} for m in members}
    # Sticky: keep previous partitions still eligible, up to an even share.
    share = -(-len(eligible) // max(1, sum(1 for m in members if members[m])))
    for m in sorted(members):
        for tid, parts in sorted(previous.get(m, {}).items(), key=lambda kv: str(kv[0])):
            for p in sorted(parts):
                key = (tid, p)
                if key in eligible and key not in owner and m in eligible[key] and count[m] < share:
                    owner[key] = m
                    count[m] += 1
    # The rest: to the eligible member with the fewest (ties by member id).
    for key in sorted(eligible, key=lambda k: (str(k[0]), k[1])):
        if key not in owner:
            m = min(eligible[key], key=lambda x: (count[x], x))
            owner[key] = m
            count[m] += 1
    # Balance: move from a fuller to an emptier eligible member while that helps.
    moved = True
    while moved:
        moved = False
        for key in sorted(owner, key=lambda k: (str(k[0]), k[1])):
            a = owner[key]
            b = min(eligible[key], key=lambda x: (count[x], x))
            if count[b] < count[a] - 1:
                owner[key] = b
                count[a] -= 1
                count[b] += 1
                moved = True
    out: dict[str, Assignment] = {m: {} for m in members}
    for (tid, p), m in owner.items():
        out[m].setdefault(tid, set()).add(p)
    return out


ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}
DEFAULT_ASSIGNOR = "uniform"
