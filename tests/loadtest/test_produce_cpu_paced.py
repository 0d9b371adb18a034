"""loadtest.produce_cpu's paced shape (issue 40): ``java6`` is what a Java producer with
default settings sends to 6 partitions (a ~16 KiB batch for each in every request);
``paced`` sends the requests on a schedule (never more than a window unanswered) and
counts the partition errors the agent answers."""

from __future__ import annotations

import socket
import threading

from kafka_protocol.framing import encode_response, parse_request_header
from kafka_protocol.messages import ProduceRequest, ProduceResponse
from kafka_protocol.records import iter_batches
from loadtest.produce_paced import PACED, frames, paced


def test_java6_is_one_16_kib_batch_per_partition_per_request() -> None:
    partitions, per_request, records = PACED["java6"]
    (frame,) = frames("t", partitions, per_request, records, 1024)
    _, pos = parse_request_header(memoryview(frame)[4:])
    req = ProduceRequest.decode(memoryview(frame)[4 + pos :], 9)
    (topic,) = req.topic_data
    assert sorted(p.index for p in topic.partition_data) == list(range(6))
    for p in topic.partition_data:
        assert p.records is not None
        (batch,) = list(iter_batches(p.records))
        assert batch.records_count == 16
        assert 16 * 1024 <= len(p.records) < 17 * 1024


def _agent(conn: socket.socket, n: int, error_every: int) -> None:
    """Answer ``n`` Produce requests, one partition error every ``error_every``."""
    R = ProduceResponse.TopicProduceResponse
    buf = b""
    for i in range(n):
        while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
            buf += conn.recv(1 << 16)
        size = int.from_bytes(buf[:4], "big")
        frame, buf = memoryview(buf[4 : 4 + size]), buf[4 + size :]
        header, pos = parse_request_header(frame)
        req = ProduceRequest.decode(frame[pos:], 9)
        resp = ProduceResponse(
            responses=[
                R(name=t.name, partition_responses=[
                    R.PartitionProduceResponse(index=p.index, error_code=6 if i % error_every == 0 and k == 0 else 0)
                    for k, p in enumerate(t.partition_data)
                ])
                for t in req.topic_data
            ]
        )  # fmt: skip
        conn.sendall(b"".join(encode_response(header.correlation_id, resp, 9)))


def test_paced_sends_every_request_and_counts_the_errors() -> None:
    fr = frames("t", *PACED["java6"], 64)
    a, b = socket.socketpair()
    t = threading.Thread(target=_agent, args=(b, 40, 10), daemon=True)
    t.start()
    errors, late = paced(a, fr, 40, per_s=2000.0, window=5)
    t.join(10)
    a.close()
    b.close()
    assert not t.is_alive()  # every request was sent and answered
    assert errors == 4  # requests 0, 10, 20, 30
    assert 0 <= late <= 40
