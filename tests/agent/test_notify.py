"""The commit notifier (agent.notify): a commit wakes exactly the long-polls and
fetch sessions waiting on its partitions, and forgets them when they leave."""

from __future__ import annotations

import uuid

from agent.notify import CommitNotifier, PartitionKey

T = uuid.UUID(int=7)


class _Session:
    def __init__(self) -> None:
        self.seen: list[PartitionKey] = []

    def changed(self, key: PartitionKey) -> None:
        self.seen.append(key)


def test_a_commit_wakes_the_fetches_and_sessions_of_its_partitions():
    n = CommitNotifier()
    s = _Session()
    n.subscribe(s, [(T, 0), (T, 1)])
    with n.watch([(T, 1), (T, 2)]) as ev, n.watch([(T, 3)]) as other:
        assert sorted(n.watched_keys(), key=lambda k: k[1]) == [(T, 0), (T, 1), (T, 2), (T, 3)]
        n.notify(iter([(T, 1), (uuid.UUID(int=8), 3)]))
        assert ev.is_set() and not other.is_set()
        assert s.seen == [(T, 1)]
        n.notify_all()
        assert other.is_set() and sorted(k[1] for k in s.seen) == [0, 1, 1]
    # Leaving the watch keeps the session's interest, and only it.
    assert sorted(k[1] for k in n.watched_keys()) == [0, 1]
    n.unsubscribe(s, [(T, 0), (T, 1), (T, 5)])
    assert n.watched_keys() == []
    g = n.generation
    n.notify([(T, 0)])  # nobody waits: still a new generation (agent.fetch.watermark_views)
    assert n.generation == g + 1 and len(s.seen) == 3
