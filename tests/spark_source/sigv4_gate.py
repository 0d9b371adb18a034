"""A gate in front of moto's S3 server that checks presigned GETs as S3 does.

moto's server does not verify query-string (presigned) signatures at all, so a
test against it alone cannot show that a URL is refused for other bytes. This
gate recomputes the SigV4 query signature of each request it gets, the way S3
does: canonical request from the method, path, query (minus the signature)
and the *received* values of the headers listed in ``X-Amz-SignedHeaders``,
with the secret of the access key; a mismatch or an expired URL is answered
403 ``SignatureDoesNotMatch``/``AccessDenied``, a match is forwarded to moto.
URLs are presigned for moto's host; :meth:`SigV4Gate.route` points one at the
gate while the signature is checked against the host it was signed for.
"""

from __future__ import annotations

import hmac
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from botocore.auth import S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


class SigV4Gate:
    def __init__(self, upstream: str, secrets: dict[str, str]) -> None:
        self.upstream = upstream.rstrip("/")
        self.secrets = secrets  # access key id -> secret access key
        self.refused: list[str] = []
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                gate._serve(self)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SigV4Gate:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def route(self, url: str) -> str:
        """``url`` (presigned for moto) sent to the gate instead."""
        parts = urlsplit(url)
        return urlunsplit(parts._replace(netloc=urlsplit(self.url).netloc))

    def check(self, path_qs: str, headers: dict[str, str]) -> str | None:
        """Why S3 would refuse this presigned GET, or None if it would serve it."""
        path, _, query = path_qs.partition("?")
        q = parse_qsl(query, keep_blank_values=True)
        params = dict(q)
        if "X-Amz-Signature" not in params:
            return "AccessDenied: not presigned"
        ak, _day, region, _svc, _ = params["X-Amz-Credential"].split("/")
        stamp = params["X-Amz-Date"]
        signed_at = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
        if time.time() > signed_at + int(params["X-Amz-Expires"]):
            return "AccessDenied: Request has expired"
        secret = self.secrets.get(ak)
        if secret is None:
            return "InvalidAccessKeyId"
        lower = {k.lower(): v for k, v in headers.items()}
        lower["host"] = urlsplit(self.upstream).netloc  # the host the URL was signed for
        signed = params["X-Amz-SignedHeaders"].split(";")
        # The received values of the signed headers; a signed header that was not
        # sent is simply absent, and the signature cannot match then (as on S3).
        sent = {h: lower[h] for h in signed if h in lower}
        rest = [(k, v) for k, v in q if k != "X-Amz-Signature"]
        req = AWSRequest(method="GET", url=f"{self.upstream}{path}?{urlencode(rest)}", headers=sent)
        req.context["timestamp"] = stamp
        auth = S3SigV4QueryAuth(
            Credentials(ak, secret, params.get("X-Amz-Security-Token")),
            "s3",
            region,
            expires=int(params["X-Amz-Expires"]),
        )
        canonical = auth.canonical_request(req)
        expected = auth.signature(auth.string_to_sign(req, canonical), req)
        if not hmac.compare_digest(expected, params["X-Amz-Signature"]):
            return "SignatureDoesNotMatch"
        return None

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        why = self.check(h.path, dict(h.headers.items()))
        if why is not None:
            self.refused.append(why)
            body = f"<Error><Code>{why}</Code></Error>".encode()
            h.send_response(403)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        fwd = {k: v for k, v in h.headers.items() if k.lower() == "range"}
        req = urllib.request.Request(self.upstream + h.path, headers=fwd)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, data, ctype = r.status, r.read(), r.headers.get("Content-Range")
        except urllib.error.HTTPError as e:
            status, data, ctype = e.code, e.read(), None
        h.send_response(status)
        h.send_header("Content-Length", str(len(data)))
        if ctype:
            h.send_header("Content-Range", ctype)
        h.end_headers()
        h.wfile.write(data)
