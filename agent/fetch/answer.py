"""Step 9 of a Fetch: the response, one entry per partition with something to say.

Where it sits: last, after :mod:`agent.fetch.poll` has the looks' results.
:func:`full` answers a sessionless request or the first request of a session
(every requested partition, in request order); :func:`incremental` answers a
session's later request with only the partitions that have news, in the order
the session holds them. Both record in the session what they told the client
(high watermark, last stable offset, log start offset) and count the bytes
fetched; every partition entry is built by :func:`partition_data` (an empty
record set, never null; ``preferred_read_replica`` -1; the tagged fields'
defaults shared).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.metrics import METRICS
from kafka_protocol.messages import FetchRequest, FetchResponse

if TYPE_CHECKING:
    from agent.fetch.model import PartitionFetch, Want
    from agent.fetch.session import FetchSession, SessionKey

TopicData = FetchResponse.FetchableTopicResponse
PartitionData = TopicData.PartitionData
Aborted = PartitionData.AbortedTransaction

# The tagged fields' defaults, one instance each for every entry: the fetch path
# never sets or mutates them, and three fresh objects per partition were half the
# cost of building a response of 500 partitions (a sessionless consumer at width).
_NO_EPOCH = PartitionData.EpochEndOffset()
_NO_LEADER = PartitionData.LeaderIdAndEpoch()
_NO_SNAPSHOT = PartitionData.SnapshotId()


def partition_data(partition: int, pf: PartitionFetch) -> PartitionData:
    """The response entry of one partition (every Fetch response is built here)."""
    if pf.error:
        return PartitionData(
            partition_index=partition, error_code=pf.error,
            high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
            diverging_epoch=_NO_EPOCH, current_leader=_NO_LEADER, snapshot_id=_NO_SNAPSHOT,
            aborted_transactions=[], preferred_read_replica=-1, records=b"",
        )  # fmt: skip
    return PartitionData(
        partition_index=partition, error_code=0,
        high_watermark=pf.high_watermark, last_stable_offset=pf.lso,
        log_start_offset=pf.log_start_offset,
        diverging_epoch=_NO_EPOCH, current_leader=_NO_LEADER, snapshot_id=_NO_SNAPSHOT,
        aborted_transactions=[Aborted(producer_id=a[0], first_offset=a[1]) for a in pf.aborted],
        preferred_read_replica=-1, records=pf.records,
    )  # fmt: skip


def error(code: int, session_id: int = 0) -> FetchResponse:
    """A top-level error (the session errors of KIP-227)."""
    return FetchResponse(error_code=code, session_id=session_id, responses=[])


def full(
    req: FetchRequest,
    wants: list[Want],
    results: list[PartitionFetch],
    session: FetchSession | None = None,
    keys: list[SessionKey] | None = None,
) -> FetchResponse:
    """Every requested partition, in request order; a new session (its partitions'
    ``keys``) learns what each was told."""
    METRICS.fetched_bytes.inc(sum(len(r.records) for r in results))
    topics = [TopicData(topic=t.topic, topic_id=t.topic_id, partitions=[]) for t in req.topics]
    for w, pf in zip(wants, results, strict=True):
        topics[w.topic_index].partitions.append(partition_data(w.partition, pf))
    if session is None or keys is None:
        return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
    for key, pf in zip(keys, results, strict=True):
        hwm, lso, log_start = pf.offsets_sent()
        session.observed(key, pf.error, hwm)
        session.sent(key, hwm, lso, log_start, bool(pf.records))
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=session.id, responses=topics)


def incremental(session: FetchSession, answer: dict[SessionKey, PartitionFetch]) -> FetchResponse:
    """The partitions of a session with news, in the session's order (one forgotten
    meanwhile is left out); the session learns what each was told."""
    topics: dict[object, TopicData] = {}
    parts = session.partitions
    for key, pf in sorted(answer.items(), key=lambda kv: parts[kv[0]].order if kv[0] in parts else 0):
        part = parts.get(key)
        if part is None:  # forgotten meanwhile
            continue
        td = topics.get(key[0])
        if td is None:
            td = topics[key[0]] = TopicData(topic=part.topic, topic_id=part.topic_ref, partitions=[])
        td.partitions.append(partition_data(part.partition, pf))
        hwm, lso, log_start = pf.offsets_sent()
        session.sent(key, hwm, lso, log_start, bool(pf.records))
    METRICS.fetched_bytes.inc(sum(len(pf.records) for pf in answer.values()))
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=session.id, responses=list(topics.values()))
