"""Metadata at width: responses assembled from cached, pre-encoded topic entries.

Where it sits: ``broker.metadata``, used by the Metadata handler
(agent/handlers/metadata.py). A topic's entry in a Metadata response (its
name, id and one leader per partition) changes only when the topic changes
(created, deleted, partitions added) or when the ring of live agents changes.
Rebuilding 10,000 partition structs and encoding them on every request cost
tens of milliseconds per request; here each topic entry is encoded once per
(topic id, partition count, client zone, API version) and kept as bytes, and a
response is the encoded head (brokers, cluster id, controller) with the
cached topic entries spliced into its topic array. Nothing loops over the
partitions of an unchanged topic.

Invalidation: the whole cache is dropped when the rings object changes (a
membership change builds new rings). The list of all topics is read from the
metastore on every all-topics request (one query, so a topic created through
another agent shows at once; :meth:`MetadataCache.all_topics` is there for a
caller that accepts the topic TTL); entries need no invalidation on such changes,
being keyed by topic id (never reused) and partition count (a grown topic gets
a new entry), so changes made through another agent show as soon as the
broker's topic cache (same TTL) sees them.

The splice is generic over versions: encoding a response with no topics and
one with a single topic gives, by their first differing byte, where the topic
array starts and how long the fixed tail after it is (:func:`_layout`); an
entry is the bytes between. The hypothesis test in
tests/agent/test_metadata_cache.py checks the spliced bytes equal the plain
encoding for every version.
"""

from __future__ import annotations

import functools
import struct
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kafka_protocol.messages import MetadataResponse
from kafka_protocol.messages._runtime import uvarint

Topic = MetadataResponse.MetadataResponseTopic
Partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition

_FLEXIBLE_MIN = MetadataResponse.FLEXIBLE_MIN or 1 << 30
_PROBE_ID = uuid.UUID(int=1)
# Bytes of cached topic entries at most (~20-30 per partition): a bound, not a
# tuning knob; the cache is dropped whole when it is reached.
MAX_BYTES = 64 << 20


@functools.cache
def _layout(version: int) -> tuple[int, int, int]:
    """(offset of the topic array's count, size of that count, size of the tail
    after the array) in an encoded MetadataResponse with default head fields."""
    empty = MetadataResponse(topics=[]).encode(version)
    one = MetadataResponse(topics=[Topic(name="x", topic_id=_PROBE_ID)]).encode(version)
    i = next(i for i, (a, b) in enumerate(zip(empty, one, strict=False)) if a != b)
    count_size = 1 if version >= _FLEXIBLE_MIN else 4
    return i + 1 - count_size, count_size, len(empty) - (i + 1)


def _count(n: int, version: int) -> bytes:
    return uvarint(n + 1) if version >= _FLEXIBLE_MIN else struct.pack(">i", n)


def encode_topic(topic: Topic, version: int) -> bytes:
    """The bytes of one entry of a MetadataResponse's topic array."""
    start, size, tail = _layout(version)
    body = MetadataResponse(topics=[topic]).encode(version)
    return body[start + size : len(body) - tail]


class EncodedResponse:
    """A response whose body is already encoded, as ``encode_response`` takes it."""

    __slots__ = ("cls", "parts", "version")

    def __init__(self, cls: Any, parts: list[bytes], version: int) -> None:
        self.cls = cls
        self.parts = parts
        self.version = version

    def encode_parts(self, version: int) -> list[bytes]:
        assert version == self.version, (version, self.version)
        return self.parts

    def header_version(self, version: int) -> int:
        return int(self.cls.header_version(version))

    def decode(self) -> Any:
        """The response as a message object (tests, debugging)."""
        return self.cls.decode(b"".join(self.parts), self.version)


def assemble(head: MetadataResponse, entries: Sequence[bytes], version: int) -> EncodedResponse:
    """``head`` (its topics ignored) with ``entries`` as its topic array."""
    _, size, tail = _layout(version)
    head.topics = []
    body = head.encode(version)
    # The head's own fields (brokers, cluster id) move the array: find it from the end.
    cut = len(body) - tail
    return EncodedResponse(
        MetadataResponse,
        [body[: cut - size] + _count(len(entries), version), *entries, body[cut:]],
        version,
    )


Leaders = Callable[[uuid.UUID, int], list[int]]


class MetadataCache:
    """Encoded topic entries per (topic id, partitions, zone, version), and the
    topic list; valid for one rings object."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._rings: object = None
        self._leaders: dict[tuple[uuid.UUID, int, str | None], list[int]] = {}
        self._entries: dict[tuple[uuid.UUID, int, str | None, int], bytes] = {}
        self._all: tuple[float, list[Any]] | None = None
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def invalidate(self) -> None:
        """A topic was created, deleted or grown: list the topics again. Entries
        stay: they are keyed by (id, partition count), and ids are never reused."""
        self._all = None

    def clear(self) -> None:
        self._leaders.clear()
        self._entries.clear()
        self._bytes = 0

    def check_rings(self, rings: object) -> None:
        """Membership changed (new rings): every leader may have moved."""
        if rings is not self._rings:
            self._rings = rings
            self.clear()

    async def all_topics(self, now: float, load: Callable[[], Awaitable[list[Any]]]) -> list[Any]:
        hit = self._all
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        topics = await load()
        self._all = (now, topics)
        return topics

    def entry(
        self,
        topic_id: uuid.UUID,
        name: str,
        partitions: int,
        zone: str | None,
        version: int,
        leaders: Callable[[], list[int]],
    ) -> bytes:
        key = (topic_id, partitions, zone, version)
        hit = self._entries.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        lkey = (topic_id, partitions, zone)
        nodes = self._leaders.get(lkey)
        if nodes is None:
            nodes = self._leaders[lkey] = leaders()
        topic = Topic(
            error_code=0,
            name=name,
            topic_id=topic_id,
            is_internal=False,
            partitions=[
                Partition(
                    error_code=0,
                    partition_index=p,
                    leader_id=node,
                    leader_epoch=0,
                    replica_nodes=[node],
                    isr_nodes=[node],
                    offline_replicas=[],
                )
                for p, node in enumerate(nodes)
            ],
        )
        data = encode_topic(topic, version)
        if self._bytes + len(data) > MAX_BYTES:
            self.clear()
        self._entries[key] = data
        self._bytes += len(data)
        return data
