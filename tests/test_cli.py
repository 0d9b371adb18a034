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


def test_topics_create_list_describe_delete(tmp_path, capsys):
    import json

    url = f"sqlite:///{tmp_path / 'sub' / 'meta.db'}"
    assert main(["topics", "--metastore", url, "create", "orders", "-p", "3", "-c", "retention.ms=60000"]) == 0
    assert main(["topics", "--metastore", url, "list"]) == 0
    assert "orders\t3" in capsys.readouterr().out
    assert main(["topics", "--metastore", url, "describe", "orders"]) == 0
    desc = json.loads(capsys.readouterr().out)
    assert [p["high_watermark"] for p in desc["partitions"]] == [0, 0, 0]
    assert desc["config"]["retention.ms"] == "60000"
    assert main(["topics", "--metastore", url, "create", "orders"]) == 1
    assert "TOPIC_ALREADY_EXISTS" in capsys.readouterr().err
    assert main(["topics", "--metastore", url, "create", "bad name!"]) == 1
    assert main(["topics", "--metastore", url, "delete", "orders"]) == 0
    capsys.readouterr()
    assert main(["topics", "--metastore", url, "list"]) == 0
    assert "orders" not in capsys.readouterr().out


def test_agent_rejects_bad_config(capsys):
    assert main(["agent", "--objects", "not-a-url"]) == 2
    assert "invalid configuration" in capsys.readouterr().err
