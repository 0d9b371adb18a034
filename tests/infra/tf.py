"""Helpers for the deploy-artifact tests: locate terraform and its offline AWS
provider, parse the Terraform tree with python-hcl2, and render the tiny subset
of HCL expressions that the agent environment map is allowed to use.

The module (infra/terraform/modules/floe) keeps the agent's FLOE_* environment
in one ``locals`` map; :func:`render` turns its values into strings, given the
variable defaults and a few test-chosen locals (bucket, region, ...).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TF_ROOT = REPO_ROOT / "infra" / "terraform"
MODULE_DIR = TF_ROOT / "modules" / "floe"
EXAMPLE_DIR = TF_ROOT / "examples" / "basic"
PLUGIN_DIR_GLOBS = ("/opt/tf-plugins", "/usr/share/terraform/plugins", "~/.terraform.d/plugins")

INTERPOLATION = re.compile(r"\$\{([^{}]*)\}")
REF = re.compile(r"^(?:(tostring|urlencode)\()?\s*(var|local)\.([a-z0-9_]+)\s*\)?$")
VAR_REF = re.compile(r"\bvar\.([a-z0-9_]+)")
LOCAL_REF = re.compile(r"\blocal\.([a-z0-9_]+)")


def require(what: str, found: object) -> None:
    """Fail with one line naming what is missing (``make test`` installs checkov;
    terraform and its AWS provider come with the project's image)."""
    if not found:
        pytest.fail(f"{what} is missing", pytrace=False)


def terraform_bin() -> str | None:
    return os.environ.get("TERRAFORM") or shutil.which("terraform")


def aws_plugin_dir() -> Path | None:
    """The filesystem mirror holding registry.terraform.io/hashicorp/aws/<version>/..."""
    candidates = [os.environ.get("FLOE_TF_PLUGIN_DIR", ""), *PLUGIN_DIR_GLOBS]
    for c in candidates:
        if not c:
            continue
        d = Path(c).expanduser()
        if any(d.glob("registry.terraform.io/hashicorp/aws/5.*/*/terraform-provider-aws*")):
            return d
    return None


# -- python-hcl2 -----------------------------------------------------------------------


def load_tf(path: Path) -> dict[str, Any]:
    try:
        import hcl2
    except ImportError:
        require("python-hcl2 (the dev extra: pip install -e '.[dev]')", None)
        raise

    opts = hcl2.SerializationOptions(with_comments=False, strip_string_quotes=True)
    with open(path) as f:
        return strip_labels(hcl2.load(f, serialization_options=opts))


def strip_labels(node: Any) -> Any:
    """Drop python-hcl2's ``__is_block__`` markers and quotes around block labels."""
    if isinstance(node, dict):
        return {
            k.strip('"'): strip_labels(v)
            for k, v in node.items()
            if k not in ("__is_block__", "__comments__")
        }
    if isinstance(node, list):
        return [strip_labels(v) for v in node]
    return node


@dataclass
class TfDir:
    """Every top-level block of a directory's .tf files, merged."""

    path: Path
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> TfDir:
        d = cls(path)
        for f in sorted(path.glob("*.tf")):
            d.files[f.name] = load_tf(f)
        return d

    def blocks(self, kind: str) -> list[dict[str, Any]]:
        return [b for doc in self.files.values() for b in doc.get(kind, [])]

    def variables(self) -> dict[str, dict[str, Any]]:
        return {name: body for b in self.blocks("variable") for name, body in b.items()}

    def locals(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for b in self.blocks("locals"):
            out.update(b)
        return out

    def resources(self) -> dict[str, dict[str, Any]]:
        """``type.name`` -> body, for resources, data sources and ephemeral resources."""
        out: dict[str, dict[str, Any]] = {}
        for kind, prefix in (("resource", ""), ("data", "data."), ("ephemeral", "ephemeral.")):
            for b in self.blocks(kind):
                for rtype, named in b.items():
                    for name, body in named.items():
                        out[f"{prefix}{rtype}.{name}"] = body
        return out

    def text(self) -> str:
        return "\n".join(f.read_text() for f in sorted(self.path.glob("*.tf")))


def text_of(node: Any) -> str:
    """Every string inside ``node``, joined: for finding references."""
    if isinstance(node, dict):
        return " ".join(f"{k} {text_of(v)}" for k, v in node.items())
    if isinstance(node, list):
        return " ".join(text_of(v) for v in node)
    return str(node)


def var_refs(node: Any) -> set[str]:
    return set(VAR_REF.findall(text_of(node)))


def local_refs(node: Any) -> set[str]:
    return set(LOCAL_REF.findall(text_of(node)))


def vars_behind(node: Any, locals_: dict[str, Any]) -> set[str]:
    """Variables ``node`` depends on, following locals transitively."""
    seen: set[str] = set()
    out = var_refs(node)
    todo = list(local_refs(node))
    while todo:
        name = todo.pop()
        if name in seen or name not in locals_:
            continue
        seen.add(name)
        out |= var_refs(locals_[name])
        todo.extend(local_refs(locals_[name]))
    return out


# -- rendering the agent environment ---------------------------------------------------


def tf_string(value: Any) -> str:
    """Terraform's tostring(): true/false, integers without a decimal point."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def render(expr: str, variables: dict[str, Any], locals_: dict[str, Any]) -> str:
    """Render a string of literal text and ``${[fn(]var.x|local.y[)]}`` pieces."""
    from urllib.parse import quote

    def one(m: re.Match[str]) -> str:
        ref = REF.match(m.group(1).strip())
        if ref is None:
            raise ValueError(
                f"unsupported expression ${{{m.group(1)}}} in the agent environment: keep values to "
                "literals and (tostring|urlencode)(var.x|local.y) (tests/infra/tf.py renders them)"
            )
        fn, kind, name = ref.groups()
        table = variables if kind == "var" else locals_
        if name not in table:
            raise KeyError(f"{kind}.{name} has no value for rendering (add it to the test)")
        value = tf_string(table[name])
        return quote(value, safe="") if fn == "urlencode" else value

    return INTERPOLATION.sub(one, expr)


def variable_defaults(d: TfDir) -> dict[str, Any]:
    return {name: body["default"] for name, body in d.variables().items() if "default" in body}


# -- running terraform offline ---------------------------------------------------------


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


def init_tree(terraform: str, tmp: Path) -> tuple[Path, dict[str, str]]:
    """A copy of infra/terraform under ``tmp`` with the module and the example
    initialised offline (so `terraform init` leaves nothing in the repository)."""
    plugins = aws_plugin_dir()
    require(
        "a local copy of the AWS provider (terraform-provider-aws 5.x, e.g. /opt/tf-plugins)",
        plugins,
    )
    root = tmp / "terraform"
    shutil.copytree(
        TF_ROOT,
        root,
        ignore=shutil.ignore_patterns(".terraform", ".terraform.lock.hcl", "*.tfstate*"),
    )
    env = tf_env(tmp)
    for d in (root / "modules" / "floe", root / "examples" / "basic"):
        init = [
            terraform,
            "init",
            "-backend=false",
            f"-plugin-dir={plugins}",
            "-input=false",
            "-no-color",
        ]
        check(run(init, d, env), f"terraform init in {d.relative_to(root)}")
    return root, env
