"""Deploy artifacts: Terraform module and example, Dockerfile, checkov, and a real
agent booted with the environment the Terraform module gives it."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "infra: deploy artifacts (Terraform, Dockerfile, checkov); run by CI"
    )
