"""The `floe` command is installed and reports its version."""

import subprocess
import sys

from floe_cli.main import main


def test_version_subcommand(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("floe ")


def test_console_script_runs():
    out = subprocess.run(
        [sys.executable, "-m", "floe_cli.main", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("floe 0.")
