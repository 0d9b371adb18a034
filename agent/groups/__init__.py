"""The classic consumer-group coordinator (JoinGroup/SyncGroup/Heartbeat/...).

See :mod:`agent.groups.coordinator` for the state machine, :mod:`agent.groups.state`
for the in-memory model and :mod:`agent.groups.timers` for the clock-driven deadlines.
"""

from agent.groups.coordinator import GroupConfig, GroupCoordinator, JoinRequest
from agent.groups.state import GroupDescription, GroupState, JoinResult, SyncResult

__all__ = [
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupState",
    "JoinRequest",
    "JoinResult",
    "SyncResult",
]
