"""terraform fmt / validate / test, offline, with the image's local AWS provider.

The tree is copied to a temp dir first so that `terraform init` leaves no
.terraform/ or lock file in the repository. Skipped when terraform or the local
provider copy is absent; under CI (env CI set) that is a failure instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.infra.tf import TF_ROOT, aws_plugin_dir, require, terraform_bin

pytestmark = [pytest.mark.infra, pytest.mark.timeout(300)]


def tf_env(tmp: Path) -> dict[str, str]:
    cfg = tmp / "terraformrc"
    cfg.write_text("")  # no ~/.terraformrc: no registry mirrors, no warnings
    return {
        **os.environ,
        "TF_CLI_CONFIG_FILE": str(cfg),
        "TF_IN_AUTOMATION": "1",
        "TF_INPUT": "0",
        "CHECKPOINT_DISABLE": "1",  # no version check over the network
        "NO_COLOR": "1",
    }


def run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def check(p: subprocess.CompletedProcess[str], what: str) -> str:
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{what} failed (rc={p.returncode}):\n{out[-6000:]}"
    return out


@pytest.fixture(scope="module")
def terraform() -> str:
    tf = terraform_bin()
    require("terraform", tf)
    assert tf is not None
    return tf


@pytest.fixture(scope="module")
def tree(terraform: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of infra/terraform with the module and the example initialised offline."""
    plugins = aws_plugin_dir()
    require(
        "a local copy of the AWS provider (terraform-provider-aws 5.x, e.g. /opt/tf-plugins)",
        plugins,
    )
    tmp = tmp_path_factory.mktemp("tf")
    root = tmp / "terraform"
    shutil.copytree(
        TF_ROOT,
        root,
        ignore=shutil.ignore_patterns(".terraform", ".terraform.lock.hcl", "*.tfstate*"),
    )
    env = tf_env(tmp)
    for d in (root / "modules" / "floe", root / "examples" / "basic"):
        check(
            run(
                [
                    terraform,
                    "init",
                    "-backend=false",
                    f"-plugin-dir={plugins}",
                    "-input=false",
                    "-no-color",
                ],
                d,
                env,
            ),
            f"terraform init in {d.relative_to(root)}",
        )
    return root, env


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
