"""``python -m loadtest run WORKLOAD.yaml [--backend dev|postgres-s3|kafka|bootstrap=HOST:PORT] [--out DIR]``.

``python -m loadtest table DIR...`` prints one Markdown row per result.

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
    t = sub.add_parser("table", help="one Markdown row per result.json (for RESULTS.md)")
    t.add_argument("results", nargs="+", help="result directories or result.json files")
    args = ap.parse_args(argv)
    if args.command == "run":
        run(args)
        return 0
    if args.command == "table":
        from loadtest.run import table

        print(table(args.results))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
