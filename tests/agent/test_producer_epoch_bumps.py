"""floe_producer_epoch_bumps_total (issue 43): InitProducerId calls that bump a producer.

Counted: v3+ requests naming their producer (KIP-360) answered with a new epoch
or id. Not counted: a first InitProducerId (no producer named), errors.
"""

from __future__ import annotations

from agent.metrics import METRICS
from kafka_protocol.errors import ErrorCode
from kafka_protocol.messages import InitProducerIdRequest
from tests.agent.test_admin_protocol import Wire


def _bumps(kind: str) -> float:
    return METRICS.producer_epoch_bumps.labels(kind)._value.get()


def _init(wire: Wire, v: int, txn: str | None = None, pid: int = -1, epoch: int = -1):
    return wire.call(
        InitProducerIdRequest(
            transactional_id=txn, transaction_timeout_ms=60_000, producer_id=pid, producer_epoch=epoch
        ),
        v,
    )


def test_epoch_bumps_are_counted(floe_agent) -> None:
    wire = Wire(floe_agent.port)
    try:
        idem, txn = _bumps("idempotent"), _bumps("transactional")
        first = _init(wire, 4)
        assert first.error_code == 0
        assert (_bumps("idempotent"), _bumps("transactional")) == (idem, txn)  # a new producer

        bumped = _init(wire, 4, pid=first.producer_id, epoch=first.producer_epoch)  # KIP-360
        assert bumped.error_code == 0 and bumped.producer_id != first.producer_id
        assert _bumps("idempotent") == idem + 1

        bad = _init(wire, 3, pid=-1, epoch=3)
        assert bad.error_code == ErrorCode.INVALID_REQUEST
        assert _bumps("idempotent") == idem + 1

        t0 = _init(wire, 4, txn="bump-t")
        assert t0.error_code == 0 and _bumps("transactional") == txn  # first init: nothing named
        t1 = _init(wire, 4, txn="bump-t", pid=t0.producer_id, epoch=t0.producer_epoch)
        assert (t1.error_code, t1.producer_id, t1.producer_epoch) == (0, t0.producer_id, t0.producer_epoch + 1)
        assert _bumps("transactional") == txn + 1
        fenced = _init(wire, 4, txn="bump-t", pid=t0.producer_id, epoch=t0.producer_epoch + 5)
        assert fenced.error_code != 0 and _bumps("transactional") == txn + 1
    finally:
        wire.close()


def test_metric_is_exposed() -> None:
    """Both kinds are on /metrics from the start (0 until a bump), as docs/operations.md lists."""
    from prometheus_client import generate_latest

    import agent.handlers.init_producer_id  # noqa: F401 - creates the labelled series

    text = generate_latest(METRICS.registry).decode()
    for kind in ("idempotent", "transactional"):
        assert f'floe_producer_epoch_bumps_total{{kind="{kind}"}}' in text
