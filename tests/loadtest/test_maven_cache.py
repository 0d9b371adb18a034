"""Maven class paths resolved by several pytest processes at once (``make test`` runs
pytest-xdist): one Maven runs, the others wait and take its class path."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from loadtest import maven


def _fake_mvn(tmp_path: Path) -> Path:
    """A stand-in ``mvn``: counts its runs, takes a while, writes a class path of
    two jars that exist to the ``-Dmdep.outputFile`` it is given."""
    jars = [tmp_path / "a.jar", tmp_path / "b.jar"]
    for j in jars:
        j.write_bytes(b"")
    script = tmp_path / "mvn"
    script.write_text(
        "#!/bin/sh\n"
        f"echo run >> {tmp_path / 'runs'}\n"
        "for a in \"$@\"; do case $a in -Dmdep.outputFile=*) out=${a#-Dmdep.outputFile=};; esac; done\n"
        "python3 -c 'import time; time.sleep(0.5)'\n"  # widen the window two unlocked runs would share
        f"printf '%s' '{os.pathsep.join(map(str, jars))}' > \"$out\"\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def _resolve(mvn: str, cache: str, lock: str, out: str) -> None:
    maven.MAVEN_LOCK = Path(lock)  # this process's lock file: the test's
    cp = maven.resolve_classpath(mvn, Path(cache), "<project/>", "g:a:1", 60)
    Path(out).write_text(os.pathsep.join(cp))


def test_concurrent_resolutions_run_maven_once(tmp_path: Path) -> None:
    mvn = _fake_mvn(tmp_path)
    cache, lock = tmp_path / "cache", tmp_path / "floe-interop.lock"
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_resolve, args=(str(mvn), str(cache), str(lock), str(tmp_path / f"out{i}")))
        for i in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert (tmp_path / "runs").read_text().count("run") == 1
    answers = {(tmp_path / f"out{i}").read_text() for i in range(3)}
    assert answers == {os.pathsep.join(str(tmp_path / j) for j in ("a.jar", "b.jar"))}
    assert not (cache / "classpath.txt.new").exists()
    assert maven.cached_classpath(cache) == [str(tmp_path / "a.jar"), str(tmp_path / "b.jar")]


def test_failed_resolution_leaves_no_class_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = tmp_path / "mvn"
    failing.write_text("#!/bin/sh\necho 'Could not resolve dependencies' >&2\nexit 1\n")
    failing.chmod(failing.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(maven, "MAVEN_LOCK", tmp_path / "lock")
    with pytest.raises(maven.MavenUnavailable, match="Could not resolve dependencies"):
        maven.resolve_classpath(str(failing), tmp_path / "cache", "<project/>", "g:a:1", 60)
    assert maven.cached_classpath(tmp_path / "cache") is None
