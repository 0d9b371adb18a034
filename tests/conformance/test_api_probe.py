"""Every API and version Floe advertises answers a minimal valid request.

For each (API key, version) in Floe's ApiVersions answer, one request built
from the message's defaults (empty lists, empty names; a few fields set so the
request is valid: acks=-1 for Produce, replica id -1 for the fetch family, one
verify-only transaction in a batched AddPartitionsToTxn) goes
over a fresh connection; the answer must decode with that version's response
schema, never a closed connection or a hang. Where the Kafka 4.1 broker
advertises the same version, the same request goes to it and the outcome
(decoded or closed) must be the same; a difference must be in the allow-list
(scenario ``api_version_probe``, path ``<key>.v<version>``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kafka_protocol import messages as M
from tests.conformance import test_conformance as tc
from tests.conformance._harness import Target
from tests.conformance.allowlist import ALLOW, KNOWN, allowed
from tests.interop._raw import RawConn

pytestmark = [pytest.mark.conformance, pytest.mark.interop, pytest.mark.timeout(300)]

REQUESTS: dict[int, Any] = {
    cls.API_KEY: cls
    for name in dir(M)
    if name.endswith("Request") and hasattr(cls := getattr(M, name), "API_KEY")
}


def _advertised(t: Target) -> dict[int, tuple[int, int]]:
    with RawConn(t.port) as c:
        r = c.request(M.ApiVersionsRequest(client_software_name="probe", client_software_version="1"), M.ApiVersionsResponse, 3)
    return {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}


def minimal(key: int) -> Any:
    req = REQUESTS[key]()
    fields = {f.name for f in dataclasses.fields(req)}
    if "acks" in fields:
        req.acks = -1  # acks=0 has no answer
    if "timeout_ms" in fields:
        req.timeout_ms = 1000
    if "replica_id" in fields:
        req.replica_id = -1
    if "client_software_name" in fields:
        req.client_software_name, req.client_software_version = "probe", "1"
    if "max_wait_ms" in fields:
        req.max_wait_ms = 0
    if "session_timeout_ms" in fields:
        req.session_timeout_ms = 10_000
    if key == M.DescribeAclsRequest.API_KEY:
        # ANY everywhere: UNKNOWN (0) codes are refused by Kafka's parser (it closes)
        req.resource_type_filter = req.pattern_type_filter = req.operation = req.permission_type = 1
    if key == M.AddPartitionsToTxnRequest.API_KEY:
        # v4+ (broker to broker): Kafka never answers an empty batch, so one
        # verify-only transaction of an unknown id
        APT = M.AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
        req.transactions = [APT(transactional_id="probe", producer_id=1, producer_epoch=0, verify_only=True)]
    return req


def probe(t: Target, key: int, version: int) -> str:
    resp_cls = getattr(M, REQUESTS[key].__name__.replace("Request", "Response"))
    try:
        with RawConn(t.port, timeout=15) as c:
            c.request(minimal(key), resp_cls, version)
        return "decoded"
    except (ConnectionError, OSError) as e:
        return f"closed: {type(e).__name__}"
    except Exception as e:  # an answer that does not decode
        return f"undecodable: {type(e).__name__}: {e}"


def test_every_advertised_version_answers(kafka_target: Target, floe_target: Target) -> None:
    floe, kafka = _advertised(floe_target), _advertised(kafka_target)
    probed = compared = 0
    bad: list[str] = []
    for key, (lo, hi) in sorted(floe.items()):
        if key not in REQUESTS:
            bad.append(f"{key}: advertised but no request schema")
            continue
        for v in range(lo, hi + 1):
            got = probe(floe_target, key, v)
            probed += 1
            if got != "decoded":
                bad.append(f"{REQUESTS[key].__name__} v{v}: floe {got}")
                continue
            k_range = kafka.get(key)
            if k_range is None or not k_range[0] <= v <= k_range[1]:
                continue
            theirs = probe(kafka_target, key, v)
            compared += 1
            if theirs != got:
                entry = allowed("api_version_probe", f"{key}.v{v}")
                if entry is None:
                    bad.append(f"{REQUESTS[key].__name__} v{v}: floe {got}, kafka {theirs}")
                else:
                    tc._USED.add((ALLOW + KNOWN).index(entry))
    tc._PROBED.add(True)
    print(f"\napi version probe: {probed} versions probed on Floe, {compared} compared with Kafka")
    assert not bad, "\n".join(bad)
