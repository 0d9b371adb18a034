"""Jars from Maven Central for the Java programs beside Floe (drivers, Spark, brokers).

Where it sits: a helper below the benchmarks (``loadtest.spark_iceberg``) and the
test fixtures (``tests.fixtures.java``). ``maven_jars(["g:a:v", ...])`` resolves
the artifacts and their dependencies with ``mvn dependency:build-classpath`` once
and caches the class path under ``~/.m2/floe-interop/<key>/`` (outside git), so
later runs need neither Maven nor the network. Failures raise
:class:`MavenUnavailable` with one line saying what is missing.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from loadtest.buildlock import MAVEN_LOCK, exclusive

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>floe.interop</groupId><artifactId>java-{key}</artifactId><version>1</version>
  <dependencies>
{deps}
  </dependencies>
</project>
"""
_DEP = "    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"


class MavenUnavailable(RuntimeError):
    """Maven or Maven Central could not provide the artifacts."""


def _which_mvn() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenUnavailable("mvn is missing; install it with: make deps")
    return mvn


def maven_jars(coords: list[str], find_mvn: Callable[[], str] = _which_mvn) -> list[str]:
    """Jars of ``group:artifact:version`` coordinates and their dependencies.
    ``find_mvn`` is asked for Maven only when the cache cannot answer."""
    key = hashlib.sha1("\n".join(sorted(coords)).encode()).hexdigest()[:12]
    cache = Path.home() / ".m2" / "floe-interop" / key
    cached = cached_classpath(cache)
    if cached is not None:
        return cached
    deps = "\n".join(_DEP.format(g=g, a=a, v=v) for g, a, v in (c.split(":") for c in coords))
    return resolve_classpath(find_mvn(), cache, _POM.format(key=key, deps=deps), ", ".join(coords), 600)


def cached_classpath(cache: Path) -> list[str] | None:
    """The class path cached in ``cache/classpath.txt``, if every jar of it is still there."""
    cp_file = cache / "classpath.txt"
    if not cp_file.exists():
        return None
    cp = cp_file.read_text().strip()
    if cp and all(Path(j).exists() for j in cp.split(os.pathsep)):
        return cp.split(os.pathsep)
    return None


def resolve_classpath(mvn: str, cache: Path, pom: str, what: str, timeout: float) -> list[str]:
    """Resolve ``pom``'s dependencies with ``mvn`` in ``cache`` and cache the class
    path there. One Maven at a time on this machine (they share ~/.m2/repository);
    a process that waited takes the class path another one resolved meanwhile."""
    with exclusive(MAVEN_LOCK):
        cached = cached_classpath(cache)
        if cached is not None:
            return cached
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "pom.xml").write_text(pom)
        written = cache / "classpath.txt.new"  # renamed when complete: readers take no lock
        try:
            res = subprocess.run(
                [mvn, "-B", "-q", "dependency:build-classpath", f"-Dmdep.outputFile={written}"],
                cwd=cache, capture_output=True, text=True, timeout=timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            raise MavenUnavailable(f"mvn timed out resolving {what} (Maven Central unreachable?)") from e
        if res.returncode != 0 or not written.exists():
            written.unlink(missing_ok=True)
            raise MavenUnavailable(
                f"mvn could not resolve {what} (Maven Central unreachable?):\n" + (res.stdout + res.stderr)[-2000:]
            )
        os.replace(written, cache / "classpath.txt")
        return (cache / "classpath.txt").read_text().strip().split(os.pathsep)
