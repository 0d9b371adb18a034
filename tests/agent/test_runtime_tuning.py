"""An agent process tunes the interpreter once it is up (issue 13): GC and GIL switch interval."""

from __future__ import annotations

import subprocess
import sys


def test_tune_runtime_in_a_fresh_interpreter() -> None:
    code = (
        "import gc, sys\n"
        "from agent.server import GC_GEN0_THRESHOLD, SWITCH_INTERVAL_S, tune_runtime\n"
        "tune_runtime()\n"
        "assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD > 700, gc.get_threshold()\n"
        "assert abs(sys.getswitchinterval() - SWITCH_INTERVAL_S) < 1e-9 and SWITCH_INTERVAL_S < 0.005\n"
        "assert gc.get_freeze_count() > 0\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
