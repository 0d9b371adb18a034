"""The metastore over TLS with libpq's parameters, as the Terraform module's DSN
uses them against RDS: ``sslmode=verify-full&sslrootcert=<CA bundle>``.

A private Postgres with ``ssl=on`` and a certificate from a test CA for
``localhost``: the metastore (SQLAlchemy engine, asyncpg pool, migrations) and
`floe doctor` connect with verify-full; a server certificate from another CA or a
host name the certificate does not name is refused with one clear error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from metastore import open_metastore
from metastore.types import MetastoreError
from tests.fixtures.pki import TestCA
from tests.fixtures.postgres import TlsPostgres

pytestmark = [pytest.mark.postgres]
REPO = Path(__file__).resolve().parents[2]


async def test_verify_full_connects_every_path_over_tls(tls_postgres: TlsPostgres) -> None:
    pg = tls_postgres
    db = pg.create_database()
    url = pg.url(db)
    ms = await open_metastore(url)  # migrations (engine) + asyncpg pool
    try:
        await ms.register_agent("a1", "10.0.0.1", 9092, "z")  # SQLAlchemy engine
        assert [a.id for a in await ms.live_agents(0)] == ["a1"]
        # Every client connection of the metastore is encrypted.
        con = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{pg.port}/{db}", ssl=False)
        try:
            rows = await con.fetch(
                "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)"
                " WHERE a.backend_type = 'client backend' AND a.datname = $1 AND s.pid <> pg_backend_pid()",
                db,
            )
        finally:
            await con.close()
        assert rows and all(r["ssl"] for r in rows), rows
    finally:
        await ms.close()


def test_doctor_over_verify_full(tls_postgres: TlsPostgres) -> None:
    import asyncio

    from metastore.migrate import migrate

    url = tls_postgres.url(tls_postgres.create_database())
    asyncio.run(migrate(url))  # over verify-full too (alembic on the engine)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOE_")}
    res = subprocess.run(
        [sys.executable, "-m", "floe_cli.main", "doctor", "--metastore", url, "--objects", "memory://",
         "--port", "0", "--admin-port", "0", "--cluster-id", "tls"],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
    )  # fmt: skip
    assert "ok   metastore: reachable" in res.stdout and "ok   migrations" in res.stdout, res.stdout + res.stderr


async def test_verify_full_refuses_another_ca_and_a_wrong_host(
    tls_postgres: TlsPostgres, tmp_path: Path
) -> None:
    pg = tls_postgres
    db = pg.create_database()
    other = TestCA(tmp_path / "other", name="someone else's CA")
    with pytest.raises(MetastoreError, match="certificate verify failed"):
        await open_metastore(pg.url(db).replace(str(pg.ca.cert), str(other.cert)))
    # The certificate names localhost, not 127.0.0.1: verify-full checks the name,
    # verify-ca only the chain.
    with pytest.raises(MetastoreError, match=r"certificate verify failed|match"):
        await open_metastore(pg.url(db, host="127.0.0.1"))
    ms = await open_metastore(pg.url(db, host="127.0.0.1", mode="verify-ca"))
    await ms.close()
