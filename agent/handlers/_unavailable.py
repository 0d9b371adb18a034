"""Answers for requests that failed because the metastore is unreachable.

Where it sits: in :func:`agent.handlers.make_dispatcher`, around every handler
(and the Deferred it may return). When the handler fails with a
connection-level metastore error (:func:`metastore.unavailable.metastore_unavailable`:
Postgres down or restarting, the metastore service unreachable) the client gets
the API's response carrying a retriable error, as Kafka answers when it cannot
reach its controller or coordinator, instead of a closed connection and a
traceback in the log:

* coordinator APIs (groups, offsets, transactions, producer ids):
  COORDINATOR_NOT_AVAILABLE;
* Metadata: LEADER_NOT_AVAILABLE per topic;
* everything else (Produce, Fetch, ListOffsets, admin requests):
  REQUEST_TIMED_OUT.

The response mirrors the request generically: every list of the request that
has a counterpart in the response (same name, or Produce's/Fetch's renames) is
echoed element by element, copying the identifying fields they share (topic
name or id, partition index, group id, ...) and setting every ``error_code``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
import time
from typing import Any

from kafka_protocol.errors import ErrorCode

log = logging.getLogger(__name__)

COORDINATOR_APIS = frozenset((8, 9, 10, 11, 12, 13, 14, 15, 16, 22, 24, 25, 26, 28, 42, 47, 65, 66, 68, 69, 76, 77, 79, 80, 90, 91))
METADATA = 3
# request list field -> response list field, where Kafka renamed them
_RENAMES = {"topic_data": "responses", "partition_data": "partition_responses", "topics": "responses"}
_FIXED: dict[str, Any] = {"records": b"", "high_watermark": -1}
_LIST = re.compile(r"list\[(.+)\]")
_last_log = [0.0]


def error_code_for(api_key: int) -> int:
    if api_key in COORDINATOR_APIS:
        return int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if api_key == METADATA:
        return int(ErrorCode.LEADER_NOT_AVAILABLE)
    return int(ErrorCode.REQUEST_TIMED_OUT)


def _resolve(owner: type, annotation: str) -> type | None:
    m = _LIST.fullmatch(annotation.replace(" ", ""))
    if m is None:
        return None
    parts = m.group(1).split(".")
    obj: Any = sys.modules[owner.__module__]
    for p in parts:
        obj = getattr(obj, p, None)
        if obj is None:
            return None
    return obj if isinstance(obj, type) and dataclasses.is_dataclass(obj) else None


def mirror(resp_cls: type, request: Any, code: int) -> Any:
    """A ``resp_cls`` answering ``request`` with ``code`` everywhere an error goes."""
    resp = resp_cls()
    req_fields = {f.name for f in dataclasses.fields(request)} if dataclasses.is_dataclass(request) else set()
    for f in dataclasses.fields(resp_cls):
        ann = f.type if isinstance(f.type, str) else str(f.type)
        if f.name == "error_code":
            setattr(resp, f.name, code)
            continue
        if f.name in _FIXED:  # never null records; no made-up watermark
            setattr(resp, f.name, _FIXED[f.name])
            continue
        elem = _resolve(resp_cls, ann)
        if elem is not None:
            source = f.name if f.name in req_fields else next(
                (q for q, r in _RENAMES.items() if r == f.name and q in req_fields), None
            )
            items = getattr(request, source, None) if source else None
            setattr(resp, f.name, [mirror(elem, x, code) for x in items] if isinstance(items, list) else [])
        elif f.name in req_fields and f.name not in ("throttle_time_ms",):
            value = getattr(request, f.name)
            if not isinstance(value, list):
                setattr(resp, f.name, value)
    return resp


def unavailable_response(spec: Any, request: Any, api_key: int, error: BaseException) -> Any:
    now = time.monotonic()
    if now - _last_log[0] >= 5.0:  # one line per 5 s during an outage, no traceback
        _last_log[0] = now
        log.warning("metastore unavailable (%s: %s): answering %s with retriable errors",
                    type(error).__name__, str(error).splitlines()[0][:200] if str(error) else "", spec.name)
    return mirror(_response_cls(spec), request, error_code_for(api_key))


def _response_cls(spec: Any) -> type:
    import kafka_protocol.messages as messages

    cls: type = getattr(messages, spec.request_cls.__name__.replace("Request", "Response"))
    return cls
