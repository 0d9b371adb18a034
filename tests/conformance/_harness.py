"""The differential harness: one scenario, two brokers, one comparison.

Where it sits: ``tests/conformance``. A scenario is a function of a
:class:`Target` (a broker's bootstrap address plus client helpers) returning
what a client observed (plain dicts, lists, ints, strings). The test runs it
against the real Apache Kafka broker and against Floe, flattens both answers
to ``path -> value`` and compares them; by-design differences are looked up in
:mod:`tests.conformance.allowlist` and nowhere else.

Scenarios use confluent-kafka (AdminClient/Producer/Consumer) where it shows
the answer, and a raw request through Floe's own codec (``kafka_protocol``)
where the client hides it (error codes it retries, fields it does not expose).
Topic and group names are unique per scenario and target, so one broker and
one agent serve the whole session.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafka_protocol import messages
from tests.conformance.allowlist import Allow, allowed
from tests.interop._raw import RawConn

T0 = 1_700_000_000_000  # the base record timestamp of every scenario (ms)

Scenario = Callable[["Target"], Any]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    """Register a scenario under its function name (without a ``sc_`` prefix)."""
    name = fn.__name__.removeprefix("sc_")
    assert name not in SCENARIOS, f"duplicate scenario {name}"
    SCENARIOS[name] = fn
    return fn


_seq = itertools.count()


@dataclass
class Target:
    """One broker under test and the client plumbing every scenario shares."""

    name: str  # "kafka" or "floe"
    bootstrap: str
    _admin: AdminClient | None = field(default=None, repr=False)
    # One retention pass where retention is not the broker's own periodic job
    # (Floe: the compactor's); Kafka checks every second in the suite's broker.
    retention_pass: Callable[[], None] | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    # -- names ---------------------------------------------------------------------

    def topic(self, tag: str) -> str:
        return f"cf-{tag}-{self.name}-{next(_seq)}-{uuid.uuid4().hex[:6]}"

    def group(self, tag: str) -> str:
        return f"cg-{tag}-{self.name}-{next(_seq)}-{uuid.uuid4().hex[:6]}"

    # -- clients -------------------------------------------------------------------

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def producer(self, **conf: Any) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0, **conf})

    def consumer(self, **conf: Any) -> Consumer:
        base = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group("c"),
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
        }
        return Consumer({**base, **conf})

    def raw(self, req: Any, version: int) -> Any:
        """One request on a fresh connection; the decoded response."""
        resp_cls = getattr(messages, type(req).__name__.replace("Request", "Response"))
        with RawConn(self.port) as c:
            return c.request(req, resp_cls, version)

    def raw_led(self, req: Any, version: int, error_code: Callable[[Any], int]) -> Any:
        """:meth:`raw`, sent again while ``error_code(response)`` is NOT_LEADER_OR_FOLLOWER,
        for up to 30 s: Kafka can list a new partition's leader in Metadata before that
        broker leads it, and answers so meanwhile (nothing appended or read); clients
        retry it. Floe never answers it."""
        deadline = time.monotonic() + 30
        while True:
            resp = self.raw(req, version)
            if error_name(error_code(resp)) != "NOT_LEADER_OR_FOLLOWER" or time.monotonic() > deadline:
                return resp
            time.sleep(0.05)

    # -- common steps ----------------------------------------------------------------

    def create(self, topic: str, partitions: int = 1, config: dict[str, str] | None = None) -> str:
        fut = self.admin.create_topics(
            [NewTopic(topic, partitions, 1, config=config or {})], operation_timeout=30
        )
        fut[topic].result(30)
        self.wait_topic(topic, partitions)
        return topic

    def wait_topic(self, topic: str, partitions: int, timeout: float = 30) -> None:
        """Until Metadata shows every partition with a leader (Kafka propagates lazily)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = self.admin.list_topics(topic, timeout=10).topics.get(topic)
            if (
                md is not None
                and md.error is None
                and len(md.partitions) == partitions
                and all(p.leader >= 0 for p in md.partitions.values())
            ):
                return
            time.sleep(0.05)
        raise TimeoutError(f"{self.name}: topic {topic} not ready")

    def produce(
        self,
        topic: str,
        records: list[tuple[bytes | None, bytes | None, int]],
        *,
        partition: int = 0,
        headers: list[list[tuple[str, bytes | None]]] | None = None,
        **conf: Any,
    ) -> list[tuple[int, int, str | None]]:
        """``(key, value, timestamp)`` records produced as one batch (linger, then flush);
        per record ``(offset, timestamp, error name)`` as the delivery report gives them."""
        p = self.producer(**{"linger.ms": 100, "batch.num.messages": 100000, **conf})
        out: list[tuple[int, int, str | None]] = [(-1, -1, None)] * len(records)

        def report(i: int) -> Callable[[Any, Any], None]:
            def cb(err: Any, msg: Any) -> None:
                out[i] = (
                    msg.offset() if err is None else -1,
                    msg.timestamp()[1] if err is None else -1,
                    None if err is None else err.name(),
                )

            return cb

        for i, (k, v, ts) in enumerate(records):
            kw: dict[str, Any] = {"key": k, "value": v, "partition": partition, "on_delivery": report(i)}
            if ts:
                kw["timestamp"] = ts
            if headers is not None:
                kw["headers"] = headers[i]
            p.produce(topic, **kw)
        assert p.flush(30) == 0, f"{self.name}: produce to {topic} did not finish"
        return out

    def consume(
        self, topic: str, n: int, *, partition: int = 0, offset: int = 0, timeout: float = 20, **conf: Any
    ) -> list[dict[str, Any]]:
        """``n`` records (or what arrives in ``timeout``) from ``offset``, as dicts."""
        c = self.consumer(**conf)
        try:
            c.assign([TopicPartition(topic, partition, offset)])
            out: list[dict[str, Any]] = []
            deadline = time.monotonic() + timeout
            while len(out) < n and time.monotonic() < deadline:
                m = c.poll(0.1)
                if m is None:
                    continue
                if m.error() is not None:
                    out.append({"error": m.error().name()})
                    continue
                out.append(record(m))
            return out
        finally:
            c.close()

    def wait_log_start(self, topic: str, at_least: int, timeout: float = 30) -> int:
        """Until retention moved the log start to ``at_least`` (running a retention
        pass where the target needs one); the log start then."""
        deadline = time.monotonic() + timeout
        while True:
            if self.retention_pass is not None:
                self.retention_pass()
            lo = self.watermarks(topic)[0]
            if lo >= at_least or time.monotonic() > deadline:
                return lo
            time.sleep(0.2)

    def watermarks(self, topic: str, partition: int = 0) -> tuple[int, int]:
        c = self.consumer()
        try:
            return tuple(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10))  # type: ignore[return-value]
        finally:
            c.close()


def record(m: Any) -> dict[str, Any]:
    return {
        "offset": m.offset(),
        "ts": list(m.timestamp()),
        "key": m.key(),
        "value": m.value(),
        "headers": [[k, v] for k, v in (m.headers() or [])],
    }


def kafka_error(e: BaseException) -> str:
    """The Kafka error name behind a confluent-kafka exception (or the exception's type)."""
    if isinstance(e, KafkaException) and e.args:
        err = e.args[0]
        if hasattr(err, "name"):
            return str(err.name())
    return type(e).__name__


def outcome(fn: Callable[[], Any]) -> Any:
    """``fn()``'s value, or ``{"error": NAME}`` when it raises a Kafka error."""
    try:
        return fn()
    except KafkaException as e:
        return {"error": kafka_error(e)}


def error_name(code: int) -> str:
    from kafka_protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


# -- comparison ---------------------------------------------------------------------


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        if not value:
            yield prefix or ".", {}
        for k, v in value.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list | tuple):
        yield f"{prefix}.#", len(value)
        for i, v in enumerate(value):
            yield from flatten(v, f"{prefix}.{i}")
    else:
        yield prefix or ".", value


@dataclass
class Diff:
    path: str
    kafka: Any
    floe: Any
    allow: Allow | None


def compare(name: str, kafka: Any, floe: Any) -> list[Diff]:
    k, f = dict(flatten(kafka)), dict(flatten(floe))
    missing = object()
    diffs = []
    for path in sorted(set(k) | set(f)):
        kv, fv = k.get(path, missing), f.get(path, missing)
        if kv != fv:
            diffs.append(
                Diff(
                    path,
                    "<absent>" if kv is missing else kv,
                    "<absent>" if fv is missing else fv,
                    allowed(name, path),
                )
            )
    return diffs
