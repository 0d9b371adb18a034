"""KIP-848 consumer groups (the ``consumer`` group protocol), beside the classic
coordinator: :mod:`.coordinator` (heartbeat state machine), :mod:`.model`
(group, members, reconciliation), :mod:`.assignors` (uniform, range) and
:mod:`.subscriptions` (topic names and RE2 regexes)."""

from agent.groups.consumer.config import ConsumerGroupConfig
from agent.groups.consumer.coordinator import (
    ConsumerGroupCoordinator,
    Heartbeat,
    HeartbeatResult,
)

__all__ = ["ConsumerGroupConfig", "ConsumerGroupCoordinator", "Heartbeat", "HeartbeatResult"]
