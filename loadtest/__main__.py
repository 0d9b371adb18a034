"""``python -m loadtest run WORKLOAD.yaml [--backend dev|postgres-s3|bootstrap=HOST:PORT] [--out DIR]``.

The other benchmarks keep their own entry points: ``python -m loadtest.codec``,
``loadtest.objectstore``, ``loadtest.metastore``, ``loadtest.produce``.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from loadtest.run import add_parser, run

    ap = argparse.ArgumentParser(prog="python -m loadtest", description="Floe OMB-style load tests")
    sub = ap.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = ap.parse_args(argv)
    if args.command == "run":
        run(args)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
