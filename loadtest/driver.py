"""Load-generator processes (confluent-kafka), one per producer and per consumer.

Open loop, as in OMB: producer ``i`` of a process with rate ``r`` intends to
send message ``n`` at ``t0 + n / r`` whether or not earlier sends were slow.

* ``publishDelayLatency`` = actual send time - intended send time
* ``publishLatency`` = acknowledgement time - actual send time
* ``endToEndLatency`` = consumer receive time - actual send time (wall clock,
  carried in the payload; every process is on this machine, so one clock)

Payload layout: ``intended_ns(i64) send_ns(i64)`` then random bytes up to
``messageSize``. Latencies are recorded in microseconds in HdrHistograms;
every ``interval`` seconds each process sends a snapshot (counters + encoded
interval histograms) to the coordinator's queue and resets them.

Every loop here is bounded by the run's end time (plus a flush timeout).
"""

from __future__ import annotations

import os
import random
import struct
import time
from typing import Any

from hdrh.histogram import HdrHistogram

HEADER = struct.Struct(">qq")
HIST_MAX_US = 3_600_000_000  # one hour
HIST_DIGITS = 3


def new_hist() -> HdrHistogram:
    return HdrHistogram(1, HIST_MAX_US, HIST_DIGITS)


def _record(h: HdrHistogram, us: int) -> None:
    h.record_value(min(max(us, 1), HIST_MAX_US))


def wait_for_start(clock: Any, duration: float, timeout: float = 300.0) -> tuple[float, float]:
    """Wait (bounded) until the coordinator publishes the common start time."""
    deadline = time.monotonic() + timeout
    while clock.value == 0.0:
        if time.monotonic() > deadline:
            raise TimeoutError("the coordinator never started the run")
        time.sleep(0.01)
    t0 = float(clock.value)
    while (now := time.time()) < t0:
        time.sleep(min(0.01, t0 - now))
    return t0, t0 + duration


def producer_main(
    ident: str,
    bootstrap: str,
    topic: str,
    partitions: int,
    message_size: int,
    rate: float,
    key_distributor: str,
    conf: dict[str, Any],
    clock: Any,
    duration: float,
    interval: float,
    q: Any,
) -> None:
    from confluent_kafka import KafkaException, Producer

    conf = dict(conf)
    # producerDefaults: librdkafka's own defaults (linger.ms 5, batch.size 1 MB,
    # acks all), what a new user runs; otherwise the tuned settings below.
    tuned: dict[str, Any] = {} if conf.pop("floe.defaults", False) else {
        "acks": "all",
        # A diskless agent acknowledges at its segment flush (250 ms), so a linger far
        # below that only multiplies requests (at 5 ms, ~1 record per Produce request
        # and the agent's per-request CPU is the limit: ~3k msg/s); WarpStream-style
        # tuning. Override per workload with producerConfig: {linger.ms: ...}.
        "linger.ms": 50,
        "batch.size": 1_048_576,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "enable.idempotence": False,
    }
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap, **tuned, "message.timeout.ms": 120_000, **conf,
    }
    state = {"acked": 0, "acked_bytes": 0, "errors": 0}
    pub = new_hist()
    lat_rec = pub.record_value
    hdr = HEADER

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
            return
        v = msg.value()
        us = (time.time_ns() - hdr.unpack_from(v, 0)[1]) // 1000
        lat_rec(us if 0 < us < HIST_MAX_US else 1)
        state["acked"] += 1
        state["acked_bytes"] += len(v)

    config["on_delivery"] = on_delivery
    try:
        p = Producer(config)
    except KafkaException as e:
        q.put({"kind": "error", "id": ident, "error": str(e)})
        return
    delay = new_hist()
    body = os.urandom(message_size - HEADER.size)
    rng = random.Random(hash(ident))
    sent = sent_bytes = 0
    n = 0
    part = rng.randrange(partitions)
    q.put({"kind": "ready", "id": ident})
    t0, t_end = wait_for_start(clock, duration)
    k_reported = 0

    def report(k: int, final: bool = False) -> None:
        nonlocal pub, delay, lat_rec, sent, sent_bytes
        q.put({
            "kind": "p", "id": ident, "k": k, "sent": sent, "sent_bytes": sent_bytes,
            "acked": state["acked"], "acked_bytes": state["acked_bytes"], "errors": state["errors"],
            "pub": pub.encode(), "delay": delay.encode(), "final": final,
        })
        state["acked"] = state["acked_bytes"] = state["errors"] = 0
        sent = sent_bytes = 0
        pub, delay = new_hist(), new_hist()
        lat_rec = pub.record_value

    pack = HEADER.pack
    produce = p.produce
    random_key = key_distributor == "RANDOM_NANO"
    while True:
        now = time.time()
        if now >= t_end:
            break
        k = int((now - t0) // interval)
        if k != k_reported:
            report(k_reported)
            k_reported = k
        if rate > 0:
            due = t0 + n / rate
            if due > now:
                wait = due - now
                # poll() blocks in whole milliseconds; sleep (never spin) the sub-ms
                # remainder: a spinning generator steals the agent's CPU on a small box.
                if wait >= 0.001:
                    p.poll(min(wait, 0.01))
                else:
                    p.poll(0)
                    time.sleep(wait)
                continue
        else:
            due = now
        # Send every message that is due now (bounded by 1000 per pass).
        for _ in range(1000):
            send_ns = time.time_ns()
            value = pack(int(due * 1e9), send_ns) + body
            try:
                if random_key:
                    produce(topic, value, key=str(send_ns).encode())
                else:
                    produce(topic, value, partition=part)
            except BufferError:
                p.poll(0.005)
                break
            _record(delay, (send_ns - int(due * 1e9)) // 1000)
            sent += 1
            sent_bytes += message_size
            n += 1
            part = part + 1 if part + 1 < partitions else 0
            if rate <= 0:
                break
            due = t0 + n / rate
            if due > time.time():
                break
        if n % 64 == 0:
            p.poll(0)
    # Wait (bounded) for outstanding acknowledgements; they count in the last interval.
    p.flush(30)
    report(k_reported, final=True)


def consumer_main(
    ident: str,
    bootstrap: str,
    topic: str,
    assigned: list[int],
    group: str,
    conf: dict[str, Any],
    start_paused: bool,
    resume: Any,
    clock: Any,
    duration: float,
    interval: float,
    q: Any,
) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "fetch.min.bytes": 1,
        **conf,
    }
    from confluent_kafka import KafkaError

    # librdkafka may destroy its bootstrap broker handle mid-call when it learns the
    # brokers' own addresses (several agents on one port: --workers): retry those;
    # an unknown partition is never retried (that was a real bug, issue 18).
    transient = {KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._TIMED_OUT}
    # A Kafka broker that is still taking up leadership of a new topic's partitions
    # answers these for a moment; clients retry them after a backoff, as here.
    leadership = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}

    def high_watermark(tp: Any) -> int:
        # (Up to ~25 s: a 1,000-partition topic on a busy 2-core box takes that long.)
        for attempt in range(30):
            try:
                return int(c.get_watermark_offsets(tp, timeout=15)[1])
            except KafkaException as e:
                code = e.args[0].code()
                if attempt == 29 or (code not in transient and code not in leadership):
                    raise
                if code in leadership:
                    time.sleep(min(1.0, 0.1 * (attempt + 1)))
        raise AssertionError("unreachable")

    try:
        c = Consumer(config)
        tps = []
        for part in assigned:
            high = high_watermark(TopicPartition(topic, part))
            tps.append(TopicPartition(topic, part, high))
        c.assign(tps)
        if start_paused:
            c.pause(tps)
    except KafkaException as e:
        q.put({"kind": "error", "id": ident, "error": str(e)})
        return
    e2e = new_hist()
    received = received_bytes = errors = 0
    q.put({"kind": "ready", "id": ident})
    t0, t_end = wait_for_start(clock, duration)
    paused = start_paused
    k_reported = 0
    hdr = HEADER

    def report(k: int, final: bool = False) -> None:
        nonlocal e2e, received, received_bytes, errors
        q.put({
            "kind": "c", "id": ident, "k": k, "received": received,
            "received_bytes": received_bytes, "errors": errors, "e2e": e2e.encode(),
            "final": final,
        })
        e2e = new_hist()
        received = received_bytes = errors = 0

    while True:
        now = time.time()
        if now >= t_end:
            break
        if now >= t0:
            k = int((now - t0) // interval)
            if k != k_reported:
                report(k_reported)
                k_reported = k
        if paused and resume.is_set():
            c.resume(tps)
            paused = False
        msgs = c.consume(1000, 0.05)
        if not msgs:
            continue
        now_ns = time.time_ns()
        rec = e2e.record_value
        for m in msgs:
            if m.error() is not None:
                errors += 1
                continue
            v = m.value()
            if v is None or len(v) < hdr.size:
                errors += 1
                continue
            us = (now_ns - hdr.unpack_from(v, 0)[1]) // 1000
            rec(us if 0 < us < HIST_MAX_US else 1)
            received += 1
            received_bytes += len(v)
    report(k_reported, final=True)
    c.close()
