"""The planning API (agent/planning.py) over HTTP: versioned routes, and malformed input
(fuzzed) is answered with a JSON error, never a server error."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.planning import PREFIX

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {
            "ranges": st.lists(
                st.dictionaries(
                    st.sampled_from(["topic_id", "partition", "start", "end"]), json_values
                ),
                max_size=3,
            )
        },
        optional={"lease": json_values, "presign": json_values},
    ),
    st.fixed_dictionaries({"queries": st.lists(json_values, max_size=3)}),
    st.fixed_dictionaries(
        {}, optional={"subscribe": json_values, "pattern": json_values, "assign": json_values}
    ),
)


def call(
    base: str, method: str, path: str, body: Any = None, raw: bytes | None = None
) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_planning_api_routes_and_fuzz(floe_agent: Any) -> None:
    base = f"http://127.0.0.1:{floe_agent.server.admin_port}{PREFIX}"
    status, info = call(base, "GET", "")
    assert status == 200 and info["version"] == 1 and 1 in info["versions"]
    assert "secret" not in info["objects"]
    status, got = call(base, "POST", "/partitions", {"subscribe": ["none"]})
    assert (status, got) == (200, {"partitions": []})
    status, got = call(base, "PUT", "/leases/l1", {"keys": ["nope"], "ttl_ms": 1000})
    assert status == 200 and got["missing"] == ["nope"]
    assert call(base, "DELETE", "/leases/l1")[1] == {"released": True}
    status, got = call(base, "POST", "/read-plan", raw=b"{not json")
    assert status == 400 and got["error"]["type"] == "BadRequest"

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(["/partitions", "/offsets-for-times", "/read-plan"]), bodies)
    def fuzz(path: str, body: Any) -> None:
        status, got = call(base, "POST", path, body)
        assert status in (200, 400, 409, 503), (status, got)
        if status != 200:
            assert set(got["error"]) == {"type", "message"}

    fuzz()

    # Lease renewals: malformed byte runs are a 400, a run of an unknown object gets no
    # URL (the file store presigns nothing; tests/spark_source/test_range_grants.py
    # covers S3), never a server error.
    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(json_values, st.booleans())
    def fuzz_renew(ranges: Any, presign: bool) -> None:
        body = {"keys": ["nope"], "ttl_ms": 1000, "presign": presign, "ranges": ranges}
        status, got = call(base, "PUT", "/leases/l2", body)
        assert status in (200, 400, 403), (status, got)
        if status == 200:
            assert got["urls"] == {} and got["ranges"] == {}

    fuzz_renew()
