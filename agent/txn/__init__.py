"""Transactions (KIP-98, KIP-890 part 1): the coordinator and its markers.

:mod:`agent.txn.coordinator` serves the transactional ids this agent owns on the
ring; :mod:`agent.txn.markers` builds the COMMIT / ABORT control batches it writes
through the produce pipeline. State lives in the metastore (``metastore/txn.py``).
"""

from agent.txn.coordinator import TxnCoordinator
from agent.txn.markers import ABORT, COMMIT, marker_batch, parse_marker

__all__ = ["ABORT", "COMMIT", "TxnCoordinator", "marker_batch", "parse_marker"]
