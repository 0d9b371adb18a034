"""Real clients against a tiny responder built on our codec.

The responder answers ApiVersions, Metadata (one topic, one partition, led by
itself) and Produce (no error, base offset 0), and records every request frame.
Each client produces a couple of messages; we then check that our codec decodes
every frame it sent and that the produce request carries a RecordBatch v2 with
the payload.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from kafka_protocol.framing import FrameDecoder, encode_response, parse_request_header
from kafka_protocol.messages import (
    REQUESTS,
    ApiVersionsResponse,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from tests.fixtures.tools import require_tool

pytestmark = pytest.mark.interop

TOPIC = "t"


@dataclass
class Responder:
    frames: list[tuple[int, int, bytes]] = field(default_factory=list)
    produced: asyncio.Event = field(default_factory=asyncio.Event)
    payloads: list[bytes] = field(default_factory=list)
    port: int = 0
    expect: int = 2

    def _seen(self) -> int:
        n = 0
        for key, _version, body in self.frames:
            if key == 0:
                n += sum(body.count(p) for p in self.payloads)
        return n

    def answer(self, key: int, version: int, body: memoryview) -> Any:
        req = REQUESTS[key].decode(body, version)
        if key == 18:
            A = ApiVersionsResponse.ApiVersion
            keys = [
                A(api_key=k, min_version=cls.MIN_VERSION, max_version=cls.MAX_VERSION)
                for k, cls in sorted(REQUESTS.items())
            ]  # everything, or librdkafka falls back to the v0/v1 message format
            return ApiVersionsResponse(error_code=0, api_keys=keys)
        if key == 3:
            M = MetadataResponse
            T = M.MetadataResponseTopic
            return M(
                brokers=[M.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=self.port)],
                cluster_id="floe-test",
                controller_id=1,
                topics=[
                    T(
                        error_code=0,
                        name=TOPIC,
                        partitions=[
                            T.MetadataResponsePartition(
                                partition_index=0,
                                leader_id=1,
                                leader_epoch=0,
                                replica_nodes=[1],
                                isr_nodes=[1],
                            )
                        ],
                    )
                ],
            )
        if key == 0:
            assert isinstance(req, ProduceRequest)
            R = ProduceResponse.TopicProduceResponse
            resp = ProduceResponse(
                responses=[
                    R(
                        name=t.name,
                        topic_id=t.topic_id,
                        partition_responses=[
                            R.PartitionProduceResponse(index=p.index, error_code=0, base_offset=0)
                            for p in t.partition_data
                        ],
                    )
                    for t in req.topic_data
                ]
            )
            if req.acks == 0:
                return None
            return resp
        raise AssertionError(f"unexpected api key {key}")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        dec = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for frame in dec.feed(data):
                    hdr, off = parse_request_header(frame)
                    body = frame[off:]
                    self.frames.append((hdr.api_key, hdr.api_version, bytes(body)))
                    resp = self.answer(hdr.api_key, hdr.api_version, body)
                    if hdr.api_key == 0 and self._seen() >= self.expect:
                        self.produced.set()
                    if resp is not None:
                        writer.writelines(
                            encode_response(hdr.correlation_id, resp, hdr.api_version)
                        )
                        await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def _serve(payloads: list[bytes]) -> tuple[Responder, asyncio.Server]:
    r = Responder(payloads=payloads, expect=len(payloads))
    server = await asyncio.start_server(r.handle, "127.0.0.1", 0)
    r.port = server.sockets[0].getsockname()[1]
    return r, server


def _check(r: Responder, payloads: list[bytes]) -> None:
    assert r.frames
    produce = [(v, b) for k, v, b in r.frames if k == 0]
    assert produce, [k for k, _, _ in r.frames]
    found: set[bytes] = set()
    for version, body in produce:
        req = ProduceRequest.decode(body, version)
        for t in req.topic_data:
            assert t.name == TOPIC or version >= 13
            for p in t.partition_data:
                assert p.index == 0
                assert p.records is not None
                rec = bytes(p.records)
                assert rec[16] == 2  # magic byte of RecordBatch v2
                found |= {x for x in payloads if x in rec}
    assert found == set(payloads)
    for k, v, b in r.frames:
        REQUESTS[k].decode(b, v)


def _payloads(name: str) -> list[bytes]:
    return [f"{name}-message-{i}".encode() for i in range(2)]


async def test_aiokafka() -> None:
    aiokafka = pytest.importorskip("aiokafka")
    payloads = _payloads("aiokafka")
    r, server = await _serve(payloads)
    async with server:
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{r.port}", acks=1)
        await p.start()
        try:
            batch = [p.send(TOPIC, x, partition=0) for x in payloads]
            await asyncio.wait_for(asyncio.gather(*batch), 20)
        finally:
            await p.stop()
    _check(r, payloads)


async def test_kafka_python() -> None:
    kafka = pytest.importorskip("kafka")
    payloads = _payloads("kafka-python")
    r, server = await _serve(payloads)

    def run() -> None:
        p = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{r.port}", acks=1)
        try:
            for x in payloads:
                p.send(TOPIC, x, partition=0).get(timeout=20)
        finally:
            p.close(timeout=5)

    async with server:
        await asyncio.wait_for(asyncio.to_thread(run), 40)
    _check(r, payloads)


async def test_confluent_kafka() -> None:
    ck = pytest.importorskip("confluent_kafka")
    payloads = _payloads("confluent")
    r, server = await _serve(payloads)

    def run() -> None:
        p = ck.Producer({"bootstrap.servers": f"127.0.0.1:{r.port}", "acks": 1})
        for x in payloads:
            p.produce(TOPIC, x, partition=0)
        remaining = p.flush(20)
        assert remaining == 0

    async with server:
        await asyncio.wait_for(asyncio.to_thread(run), 40)
    _check(r, payloads)


async def test_kcat() -> None:
    payloads = _payloads("kcat")
    r, server = await _serve(payloads)
    async with server:
        proc = await asyncio.create_subprocess_exec(
            require_tool("kcat"),
            "-P",
            "-b",
            f"127.0.0.1:{r.port}",
            "-t",
            TOPIC,
            "-p",
            "0",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(b"\n".join(payloads) + b"\n"), 40)
        assert proc.returncode == 0, err.decode(errors="replace")
    _check(r, payloads)
