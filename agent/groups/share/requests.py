"""What ShareFetch and ShareAcknowledge have in common: resolving topic ids,
applying a request's acknowledgements, and closing a share session.

Where it sits: between the two handlers and :mod:`agent.groups.share.manager`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from agent.groups.share.manager import Key, manager_for
from agent.groups.share.sessions import ShareSession
from kafka_protocol.errors import ErrorCode

if TYPE_CHECKING:
    from agent.broker import Broker

AckBatches = list[tuple[int, int, list[int]]]


async def partition_error(broker: Broker, topic_id: uuid.UUID, partition: int) -> int:
    """0 if the partition exists, else UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION."""
    info = await broker.topic_by_id(topic_id)
    if info is None:
        return int(ErrorCode.UNKNOWN_TOPIC_ID)
    if not 0 <= partition < info.partitions:
        return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    return 0


def ack_batches(batches: Iterable[Any]) -> AckBatches:
    return [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches]


async def apply_acks(broker: Broker, group_id: str, member_id: str, topic_id: uuid.UUID, partition: int, batches: AckBatches) -> int:
    """Acknowledge and return the partition's error code (after the metastore write)."""
    err = await partition_error(broker, topic_id, partition)
    if err:
        return err
    return await manager_for(broker).acknowledge((group_id, topic_id, partition), member_id, batches)


async def release_session(broker: Broker, session: ShareSession, keys: Sequence[tuple[uuid.UUID, int]] | None = None) -> None:
    """Records the member still holds in the session's partitions go back to AVAILABLE."""
    mgr = manager_for(broker)
    for topic_id, partition in keys if keys is not None else list(session.partitions):
        if await partition_error(broker, topic_id, partition) == 0:
            key: Key = (session.group_id, topic_id, partition)
            await mgr.release(key, session.member_id)
