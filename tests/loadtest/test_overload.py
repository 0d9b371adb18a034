"""loadtest.overload's measuring parts: RSS summed over a process tree, and its defaults
(the issue's must-show: 2x the sustainable rate for 60 s, 2 workers)."""

from __future__ import annotations

import os
import subprocess
import sys

from loadtest.overload import _descendants, parser, rss_bytes


def test_rss_is_summed_over_the_process_tree() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        tree = _descendants(os.getpid())
        assert tree[0] == os.getpid() and child.pid in tree
        assert rss_bytes(os.getpid()) > 10 << 20  # this interpreter: tens of MiB
        assert rss_bytes(2**22 + 12345) == 0  # gone or never there
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)


def test_defaults_are_the_must_show() -> None:
    a = parser().parse_args([])
    assert (a.duration, a.factor, a.workers, a.producers, a.consumers) == (60, 2.0, 2, 2, 2)
