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


def test_pem_secrets_are_written_to_the_configured_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The Terraform module injects TLS_CERT_PEM/TLS_KEY_PEM from Secrets Manager and
    points FLOE_SSL_CERTFILE/FLOE_SSL_KEYFILE at files: floe agent writes them (0600)."""
    import stat

    from floe_cli.main import write_pem_secrets

    env = {
        "TLS_CERT_PEM": "-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----",
        "TLS_KEY_PEM": "-----BEGIN PRIVATE KEY-----\nxyz\n-----END PRIVATE KEY-----\n",
        "FLOE_SSL_CERTFILE": str(tmp_path / "tls" / "cert.pem"),
        "FLOE_SSL_KEYFILE": str(tmp_path / "tls" / "key.pem"),
    }
    assert write_pem_secrets(env) == [env["FLOE_SSL_CERTFILE"], env["FLOE_SSL_KEYFILE"]]
    cert = tmp_path / "tls" / "cert.pem"
    assert cert.read_text().endswith("-----END CERTIFICATE-----\n")
    assert stat.S_IMODE((tmp_path / "tls" / "key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    assert write_pem_secrets({"TLS_CERT_PEM": "x"}) == []  # no path configured: nothing written


def test_metastore_flag_parses_before_and_after_the_subcommand(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`floe metastore migrate --metastore URL` (as the docs write it) and the flag-first
    order parse to the same URL; a flag given only before the subcommand is not wiped."""
    from floe_cli.main import build_parser

    url = f"sqlite:///{tmp_path / 'm.db'}"
    parser = build_parser()
    for sub in (["migrate"], ["serve", "--port", "0"]):
        before = parser.parse_args(["metastore", "--metastore", url, *sub])
        after = parser.parse_args(["metastore", *sub, "--metastore", url])
        assert before.metastore == after.metastore == url
        assert before.log_level == after.log_level == "INFO"
    assert parser.parse_args(["metastore", "migrate"]).metastore is None
    debug = parser.parse_args(["metastore", "migrate", "--log-level", "DEBUG"])
    assert debug.log_level == "DEBUG"


def test_metastore_migrate_with_the_flag_after_the_subcommand(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import sqlite3

    db = tmp_path / "m.db"
    assert main(["metastore", "migrate", "--metastore", f"sqlite:///{db}"]) == 0
    assert "metastore schema is up to date" in capsys.readouterr().out
    with sqlite3.connect(db) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"topics", "partitions", "batches"} <= tables
