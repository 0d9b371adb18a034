"""Deploy artifacts: Terraform module and example, Dockerfile, checkov, and a real
agent booted with the environment the Terraform module gives it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.tf import init_tree, require, terraform_bin


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "infra: deploy artifacts (Terraform, Dockerfile, checkov); run by CI"
    )


@pytest.fixture(scope="session")
def terraform() -> str:
    tf = terraform_bin()
    require("terraform", tf)
    assert tf is not None
    return tf


@pytest.fixture(scope="session")
def tree(terraform: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of infra/terraform with the module and the example initialised offline."""
    return init_tree(terraform, tmp_path_factory.mktemp("tf"))
