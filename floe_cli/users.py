"""`floe users add|list|delete`: SCRAM users straight on the metastore.

Writes the salted credentials the agents' SCRAM-SHA-256/512 authentication
reads (agent.security.sasl.scram); the password never reaches the metastore.
Same as AlterUserScramCredentials from an admin client. The password comes from
``--password``, ``FLOE_USER_PASSWORD`` or a prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from typing import Any

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_users_parser(sub: Any) -> None:
    users = sub.add_parser("users", help="add, list and delete SCRAM users (SASL)")
    users.add_argument(
        "--metastore", default=None, help="metastore URL (default: floe dev's ./floe-data/meta.db)"
    )
    usub = users.add_subparsers(dest="users_command", required=True)
    a = usub.add_parser("add", help="create or rotate a user's SCRAM credentials")
    a.add_argument("name")
    a.add_argument("--password", default=None, help="(default: FLOE_USER_PASSWORD, else prompt)")
    a.add_argument("--mechanism", "-m", action="append", choices=MECHANISMS, help="(default: both)")
    a.add_argument(
        "--iterations", type=int, default=8192,  # = agent.security.sasl.scram.DEFAULT_ITERATIONS
        help="PBKDF2 iterations, 4096-16384 (default 8192)"
    )
    usub.add_parser("list", help="list users and their mechanisms (never secrets)")
    d = usub.add_parser("delete", help="delete a user's SCRAM credentials")
    d.add_argument("name")
    d.add_argument("--mechanism", "-m", action="append", choices=MECHANISMS, help="(default: both)")


async def _users(args: argparse.Namespace) -> int:
    from agent.security.sasl.scram import MAX_ITERATIONS, MIN_ITERATIONS, make_credential
    from floe_cli.topics import _default_metastore, ensure_sqlite_dir, open_or_report

    url = args.metastore or _default_metastore()
    ensure_sqlite_dir(url)
    cmd = args.users_command
    password = ""
    if cmd == "add":
        if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
            print(
                f"floe: --iterations must be in [{MIN_ITERATIONS}, {MAX_ITERATIONS}]",
                file=sys.stderr,
            )
            return 2
        password = (
            args.password
            or os.environ.get("FLOE_USER_PASSWORD")
            or getpass.getpass(f"password for {args.name}: ")
        )
        if not password:
            print("floe: empty password", file=sys.stderr)
            return 2
    meta = await open_or_report(url)
    if meta is None:
        return 1
    try:
        if cmd == "add":
            for mech in args.mechanism or MECHANISMS:
                await meta.put_scram_credential(
                    make_credential(args.name, mech, password, args.iterations)
                )
            print(f"user {args.name}: {', '.join(args.mechanism or MECHANISMS)}")
        elif cmd == "list":
            for c in await meta.list_scram_credentials():
                print(f"{c.user}\t{c.mechanism}\titerations={c.iterations}")
        elif cmd == "delete":
            deleted = [
                m
                for m in args.mechanism or MECHANISMS
                if await meta.delete_scram_credential(args.name, m)
            ]
            if not deleted:
                print(f"floe: user {args.name} has no SCRAM credentials", file=sys.stderr)
                return 1
            print(f"deleted {args.name}: {', '.join(deleted)}")
        return 0
    finally:
        await meta.close()


def run_users(args: argparse.Namespace) -> int:
    import logging

    logging.getLogger("alembic").setLevel(logging.WARNING)
    return asyncio.run(_users(args))
