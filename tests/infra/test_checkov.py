"""checkov (static security checks) over the module, offline.

checkov pins its own `hcl2` fork, which conflicts with python-hcl2 in the dev
venv, so it lives in a venv of its own: `.venv/checkov` (inside the gitignored
.venv, created by `make test`; see infra/terraform/README.md), or FLOE_CHECKOV=/path/to/checkov,
or `checkov` on PATH. Checks that do not apply are skipped, with reasons, in
infra/terraform/.checkov.yaml; every other check must pass.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.infra.tf import MODULE_DIR, REPO_ROOT, TF_ROOT, require

pytestmark = [pytest.mark.infra, pytest.mark.timeout(300)]


def checkov_bin() -> str | None:
    env = os.environ.get("FLOE_CHECKOV")
    if env:
        return env
    local = REPO_ROOT / ".venv" / "checkov" / "bin" / "checkov"
    if local.exists():
        return str(local)
    return shutil.which("checkov")


def test_checkov_module(tmp_path: Path) -> None:
    checkov = checkov_bin()
    require(
        "checkov (python3 -m venv .venv/checkov && .venv/checkov/bin/pip install checkov)", checkov
    )
    assert checkov is not None
    p = subprocess.run(
        [checkov, "--config-file", str(TF_ROOT / ".checkov.yaml"), "-d", str(MODULE_DIR), "-o", "json"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"},
    )  # fmt: skip
    try:
        report = json.loads(p.stdout)
    except ValueError:
        pytest.fail(
            f"checkov printed no JSON (rc={p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        )
    reports = report if isinstance(report, list) else [report]
    tf = [r for r in reports if r.get("check_type") == "terraform"]
    assert tf, f"no terraform report: {[r.get('check_type') for r in reports]}"
    summary = tf[0]["summary"]
    failed = tf[0]["results"].get("failed_checks", [])
    assert summary["failed"] == 0, "checkov failures:\n" + "\n".join(
        f"{c['check_id']} {c['check_name']}: {c['resource']} ({c['file_path']}:{c['file_line_range']})"
        for c in failed
    )
    assert summary["passed"] >= 100, summary
