"""Boot the agent the way ECS would run the module's task definition, without Docker.

Two halves:

* :func:`rendered_task` runs ``terraform test -json -verbose`` on one test file of
  the module (mock AWS provider, offline) and returns the agent task definition
  Terraform itself rendered: container definitions (environment, secret names,
  user, mount points, init containers) and volumes. Nothing is re-derived here.
* :func:`task_command` turns one task definition into the command that runs it
  on this host, as root, inside a private mount namespace
  (``unshare --mount --propagation private``) that mimics Fargate:

  - the image's filesystem is read-only (``readonlyRootFilesystem``): every mount
    of the host is remounted ``ro`` in the namespace, and the image's home
    directory (WORKDIR, owned by the image's user) is emulated read-only too;
  - each task volume is an empty directory owned by root, mode 0755 (what
    Fargate gives a bind-mount volume), at each container's ``containerPath``;
  - root probes writes to ``/``, ``/tmp``, the WORKDIR, the repository and the
    virtualenv, and stops if any succeeds (the test cannot pass on a writable host);
  - the init containers the agent ``dependsOn`` (condition SUCCESS) run first,
    with their own user, entry point and command and no environment;
  - the agent then runs as its container's user (or the image's USER), in the
    WORKDIR, with the environment the caller built from the task definition.

Needs root (mount namespaces) and util-linux (unshare, setpriv).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.infra.tf import REPO_ROOT, check, run

# The image (Dockerfile): the floe user's home is the WORKDIR; both are checked
# against the Dockerfile by image_layout().
PSEUDO_FS = ("/proc", "/sys", "/dev")


@dataclass
class Task:
    """One rendered ECS task definition (``aws_ecs_task_definition`` values)."""

    containers: list[dict[str, Any]]
    volumes: list[str]
    secrets_by_arn: dict[str, str] = field(default_factory=dict)  # secret ARN -> resource address

    def container(self, name: str) -> dict[str, Any]:
        (c,) = [c for c in self.containers if c["name"] == name]
        return c

    def init_containers(self, name: str = "agent") -> list[dict[str, Any]]:
        deps = self.container(name).get("dependsOn") or []
        assert all(d["condition"] == "SUCCESS" for d in deps), deps
        return [self.container(d["containerName"]) for d in deps]

    def environment(self, name: str = "agent") -> dict[str, str]:
        return {e["name"]: e["value"] for e in self.container(name).get("environment", [])}

    def secret_sources(self, name: str = "agent") -> dict[str, str]:
        """Injected name -> the address of the aws_secretsmanager_secret it comes from."""
        return {
            s["name"]: self.secrets_by_arn.get(s["valueFrom"], s["valueFrom"])
            for s in self.container(name).get("secrets", [])
        }


def rendered_task(
    terraform: str, module_dir: Path, env: dict[str, str], test_file: str, address: str
) -> Task:
    """The task definition ``address`` as applied by ``test_file``'s (only) run."""
    out = check(
        run(
            [terraform, "test", "-json", "-verbose", f"-filter={test_file}", "-no-color"],
            module_dir,
            env,
        ),
        f"terraform test {test_file}",
    )
    states = []
    for line in out.splitlines():
        if line.startswith("{") and '"test_state"' in line:
            states.append(json.loads(line)["test_state"])
    assert len(states) == 1, f"expected one applied run in {test_file}, got {len(states)}"
    resources = {r["address"]: r["values"] for r in states[0]["root_module"]["resources"]}
    td = resources[address]
    secrets = {
        v["arn"]: addr
        for addr, v in resources.items()
        if addr.startswith("aws_secretsmanager_secret.")
    }
    return Task(
        containers=json.loads(td["container_definitions"]),
        volumes=[v["name"] for v in td.get("volume", [])],
        secrets_by_arn=secrets,
    )


@dataclass(frozen=True)
class Image:
    user: str  # USER of the final stage
    workdir: str  # WORKDIR, the user's home (useradd --home-dir)
    env: dict[str, str]  # ENV of the final stage


def image_layout() -> Image:
    text = (REPO_ROOT / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM ") :]
    (user,) = re.findall(r"^USER (\S+)$", final, re.M)[-1:]
    (workdir,) = re.findall(r"^WORKDIR (\S+)$", final, re.M)[-1:]
    assert f"--home-dir {workdir}" in final, "the image's WORKDIR is the floe user's home"
    env: dict[str, str] = {}
    for block in re.findall(r"^ENV ((?:.*\\\n)*.*)$", final, re.M):
        env.update(re.findall(r"(\w+)=(\S+)", block.replace("\\\n", " ")))
    return Image(user=user, workdir=workdir, env=env)


def _uid_gid(user: str) -> tuple[str, str]:
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and (not gid or gid.isdigit()), f"numeric user expected: {user!r}"
    return uid, gid or uid


def _as_user(user: str) -> list[str]:
    uid, gid = _uid_gid(user)
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]


def task_command(
    task: Task, image: Image, argv: list[str], probe_paths: list[str], name: str = "agent"
) -> list[str]:
    """The command that runs container ``name`` of ``task`` (its process: ``argv``)
    after its init containers, in a read-only copy of this host's filesystem."""
    agent = task.container(name)
    assert agent.get("readonlyRootFilesystem") is True, "the module must keep the root read-only"
    q = shlex.quote
    volumes_of: dict[str, set[str]] = {}
    for c in [agent, *task.init_containers(name)]:
        assert c.get("readonlyRootFilesystem") is True, f"{c['name']}: root must be read-only"
        for m in c.get("mountPoints", []):
            assert m["sourceVolume"] in task.volumes, m
            volumes_of.setdefault(m["sourceVolume"], set()).add(m["containerPath"])
    uid, gid = _uid_gid(image.user)
    lines = [
        "set -eu",
        # The image's own tree: its WORKDIR (the user's home), plus the mount points
        # Docker creates for the task's volumes. A tmpfs over the parent stands in
        # for the image layer (the host has no /var/lib/floe).
        f"mount -t tmpfs -o mode=0755 floe-image {q(str(Path(image.workdir).parent))}",
        f"mkdir -p {q(image.workdir)} && chown {uid}:{gid} {q(image.workdir)}",
    ]
    for paths in volumes_of.values():
        lines += [f"mkdir -p {q(p)}" for p in sorted(paths)]
    # readonlyRootFilesystem: every writable mount becomes read-only (pseudo filesystems aside).
    pseudo = "|".join(f"{p}|{p}/*" for p in PSEUDO_FS)
    lines += [
        "awk '{print $5, $6}' /proc/self/mountinfo | while read -r m opts; do",
        f'  case "$m" in {pseudo}) continue ;; esac',
        '  case ",$opts," in *,ro,*) continue ;; esac',
        '  mount -o remount,bind,ro "$m"',
        "done",
    ]
    # The task's volumes: empty, root-owned, 0755 (Fargate bind mounts).
    for vol, paths in volumes_of.items():
        for p in sorted(paths):
            lines.append(
                f"mount -t tmpfs -o mode=0755,uid=0,gid=0,size=16m {q('vol-' + vol)} {q(p)}"
            )
    # Proof that the root is read-only here: root ignores permissions, not EROFS.
    for p in ["/", "/tmp", image.workdir, *probe_paths]:
        probe = q(str(Path(p) / ".floe-rw-probe"))
        lines.append(
            f"if ( : > {probe} ) 2>/dev/null; then rm -f {probe}; "
            f"echo 'task_boot: {p} is writable: not a read-only root' >&2; exit 97; fi"
        )
    for init in task.init_containers(name):
        cmd = [*(init.get("entryPoint") or []), *(init.get("command") or [])]
        assert cmd, f"{init['name']}: no entryPoint/command to run"
        user = init.get("user") or image.user
        lines.append(
            "env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "
            + " ".join(q(a) for a in [*_as_user(user), *cmd])
        )
    lines.append(f"cd {q(image.workdir)}")
    user = agent.get("user") or image.user
    lines.append("exec " + " ".join(q(a) for a in [*_as_user(user), *argv]))
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        "\n".join(lines),
    ]


def start_task(
    task: Task, image: Image, env: dict[str, str], log_path: Path
) -> subprocess.Popen[bytes]:
    """``python -m floe_cli.main agent`` as the task's agent container, ``env`` only."""
    argv = [sys.executable, "-m", "floe_cli.main", "agent"]
    probes = [str(REPO_ROOT), sys.prefix, str(log_path.parent)]
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            task_command(task, image, argv, probes),
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd="/",
        )  # fmt: skip


def can_unshare() -> str | None:
    """None when mount namespaces work here, else why not."""
    if os.geteuid() != 0:
        return "needs root (a private mount namespace)"
    p = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "true"],
        capture_output=True, text=True,
    )  # fmt: skip
    return None if p.returncode == 0 else f"unshare --mount failed: {p.stderr.strip()}"
