"""Re-sign a presigned S3 GET for another byte range, without botocore's per-call cost.

Where it sits: under :meth:`objectstore.s3.S3Store.presign_ranges`, which the
planning API calls for every run of batches a read plan grants
(:mod:`objectstore.byte_grants`). botocore's ``generate_presigned_url`` costs
~0.4 ms a call (its event and parameter machinery); a plan can grant tens of
thousands of runs, on the agent's event loop. URLs of one key differ only in
the signed ``Range`` header and the signature, so botocore presigns the first
range and the others are signed here by SigV4 itself (AWS "Authenticating
Requests: Using Query Parameters"): the same canonical request with the other
``range`` value, the same date, scope and query, the signing key derived once.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qsl, quote, urlsplit

_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


class RangeSigner:
    """Signs ``template`` (a SigV4 query-presigned GET whose SignedHeaders are exactly
    ``host;range``) again for other Range values."""

    def __init__(self, template: str, secret_key: str) -> None:
        parts = urlsplit(template)
        query = parse_qsl(parts.query, keep_blank_values=True)
        params = dict(query)
        if params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
            raise ValueError("not a SigV4 presigned URL")
        if params.get("X-Amz-SignedHeaders") != "host;range":
            raise ValueError(f"signed headers {params.get('X-Amz-SignedHeaders')!r}, not host;range")
        self.amz_date = params["X-Amz-Date"]
        _, day, region, service, term = params["X-Amz-Credential"].split("/")
        self.scope = f"{day}/{region}/{service}/{term}"
        key = _hmac(("AWS4" + secret_key).encode(), day)
        for part in (region, service, term):
            key = _hmac(key, part)
        self.key = key
        host = parts.hostname or ""
        if parts.port is not None and str(parts.port) != _DEFAULT_PORTS.get(parts.scheme):
            host = f"{host}:{parts.port}"
        rest = [(k, v) for k, v in query if k != "X-Amz-Signature"]
        canonical_query = "&".join(
            sorted(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in rest)
        )
        self._head = f"GET\n{parts.path}\n{canonical_query}\nhost:{host}\nrange:"
        self._tail = "\n\nhost;range\nUNSIGNED-PAYLOAD"
        base = template.split("?", 1)[0]
        unsigned = [p for p in parts.query.split("&") if not p.startswith("X-Amz-Signature=")]
        self._url = base + "?" + "&".join(unsigned) + "&X-Amz-Signature="

    def url(self, range_value: str) -> str:
        """The URL good for ``Range: range_value`` (e.g. ``bytes=0-99``) only."""
        canonical = self._head + " ".join(range_value.split()) + self._tail
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        to_sign = f"AWS4-HMAC-SHA256\n{self.amz_date}\n{self.scope}\n{digest}"
        return self._url + hmac.new(self.key, to_sign.encode(), hashlib.sha256).hexdigest()
