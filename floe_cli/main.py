"""The `floe` command line: parses arguments and wires the parts together.

No part of Floe imports this package; it is the only place that knows about
all of them.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version


def floe_version() -> str:
    try:
        return version("floe")
    except PackageNotFoundError:  # running from a source tree without install
        return "0.0.0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="floe", description="Floe: a diskless Kafka on object storage"
    )
    parser.add_argument("--version", action="version", version=f"floe {floe_version()}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("version", help="print the version")
    sub.add_parser("dev", help="run everything in one process on embedded defaults")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in (None, "version"):
        print(f"floe {floe_version()}")
        return 0
    if args.command == "dev":
        print(
            f"floe {floe_version()}: the agent is not built yet; `floe dev` only prints the version"
        )
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
