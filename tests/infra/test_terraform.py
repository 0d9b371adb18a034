"""terraform fmt / validate / test, offline, with the image's local AWS provider.

The tree is copied to a temp dir first so that `terraform init` leaves no
.terraform/ or lock file in the repository. Skipped when terraform or the local
provider copy is absent; under CI (env CI set) that is a failure instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.tf import TF_ROOT, check, run, tf_env

pytestmark = [pytest.mark.infra, pytest.mark.timeout(300)]


def test_fmt(terraform: str, tmp_path: Path) -> None:
    p = run(
        [terraform, "fmt", "-check", "-recursive", "-diff", "-no-color", str(TF_ROOT)],
        TF_ROOT,
        tf_env(tmp_path),
    )
    assert p.returncode == 0, (
        f"terraform fmt -check found unformatted files (run `terraform fmt -recursive infra/terraform`):\n{p.stdout}{p.stderr}"
    )


@pytest.mark.parametrize("where", ["modules/floe", "examples/basic"])
def test_validate(tree: tuple[Path, dict[str, str]], terraform: str, where: str) -> None:
    root, env = tree
    out = check(
        run([terraform, "validate", "-no-color"], root / where, env),
        f"terraform validate in {where}",
    )
    assert "The configuration is valid" in out
    assert "Warning" not in out, out


def test_module_tests_with_mock_provider(tree: tuple[Path, dict[str, str]], terraform: str) -> None:
    root, env = tree
    out = check(
        run([terraform, "test", "-no-color"], root / "modules" / "floe", env), "terraform test"
    )
    assert "0 failed" in out and "Success!" in out, out
    assert " 0 passed" not in out, out
