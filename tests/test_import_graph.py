"""The import graph of our packages: no cycles, and every package imports only downward.

Where it sits: a static check over the source tree (``ast``, nothing is
imported), run with the unit tests. Every import counts: module-level ones,
``if TYPE_CHECKING:`` ones and those inside functions, because each of them is
a dependency a reader has to follow and a circle among them is one a reader
cannot get out of. Relative imports are resolved; ``from pkg import name`` is an
edge to ``pkg.name`` when that is a module, else to ``pkg``. A submodule gets no
implicit edge to its parent package's ``__init__`` (Python runs it first, but
that is not a dependency the submodule's author wrote).

The generated Kafka message modules (``kafka_protocol/messages``, marked "Do not
edit by hand") are left out: they are the codegen's output, not code to
structure; imports of them are dropped. The layering is DESIGN.md's table
("may import" column): kafka_protocol < objectstore < metastore <
agent/compactor/spark_source < floe_cli, with the PySpark registration shim and
the load generator on top.
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "kafka_protocol",
    "objectstore",
    "metastore",
    "agent",
    "compactor",
    "spark_source",
    "pyspark_floe",
    "floe_cli",
    "loadtest",
)
GENERATED_MARK = "Do not edit by hand"

_BELOW_SERVERS = {"kafka_protocol", "objectstore", "metastore"}
# Our packages each one may import (DESIGN.md, "Layout"): nothing imports floe_cli
# but the load generator, and the agent, compactor and Spark source never import
# each other (``floe dev`` wires them together in floe_cli).
MAY_IMPORT: dict[str, set[str]] = {
    "kafka_protocol": set(),
    "objectstore": {"kafka_protocol"},
    "metastore": set(),
    "agent": _BELOW_SERVERS,
    "compactor": _BELOW_SERVERS,
    "spark_source": _BELOW_SERVERS,
    "pyspark_floe": _BELOW_SERVERS | {"spark_source"},
    "floe_cli": _BELOW_SERVERS | {"agent", "compactor", "spark_source"},
    "loadtest": set(PACKAGES) - {"loadtest"},
}

Graph = dict[str, set[str]]


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``packages``."""
    out: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def is_generated(tree: ast.Module) -> bool:
    doc = ast.get_docstring(tree) or ""
    return GENERATED_MARK.lower() in doc.lower()


def _known(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of our modules (None: not ours)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, tree: ast.Module, modules: Mapping[str, Path]) -> set[str]:
    """Every module of ours that ``module`` imports, anywhere in its body."""
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # the package this module lives in, then up ``level - 1`` packages
                package = module.split(".") if is_pkg else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in modules else base)
        for t in targets:
            hit = _known(t, modules)
            if hit is not None and hit != module:
                found.add(hit)
    return found


def import_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> Graph:
    """Module -> the modules of ours it imports (generated modules left out)."""
    modules = module_files(root, packages)
    trees = {m: ast.parse(p.read_text(), str(p)) for m, p in modules.items()}
    generated = {m for m, t in trees.items() if is_generated(t)}
    return {
        m: imports_of(m, modules[m], t, modules) - generated
        for m, t in trees.items()
        if m not in generated
    }


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def cycle_paths(graph: Mapping[str, set[str]], component: list[str]) -> list[str]:
    """Shortest cycles ``a -> b -> a`` inside ``component`` until every member is on one."""
    members = set(component)
    covered: set[str] = set()
    paths: list[str] = []
    for start in component:
        if start in covered:
            continue
        came_from: dict[str, str] = {}
        queue = deque([start])
        end = None
        while queue and end is None:
            v = queue.popleft()
            for w in sorted(graph[v] & members):
                if w == start:
                    end = v
                    break
                if w not in came_from:
                    came_from[w] = v
                    queue.append(w)
        assert end is not None  # a strongly connected component always leads back
        path = [end]
        while path[-1] != start:
            path.append(came_from[path[-1]])
        path = [*reversed(path), start]
        covered.update(path)
        paths.append(" -> ".join(path))
    return paths


def describe_cycles(graph: Mapping[str, set[str]]) -> str:
    lines = []
    for comp in cycles(graph):
        lines.append(f"circle of {len(comp)} modules: {', '.join(comp)}")
        lines.extend(f"    {p}" for p in cycle_paths(graph, comp))
    return "\n".join(lines)


def layering_violations(graph: Mapping[str, set[str]]) -> list[str]:
    bad = []
    for m, deps in sorted(graph.items()):
        top = m.partition(".")[0]
        for d in sorted(deps):
            other = d.partition(".")[0]
            if other != top and other not in MAY_IMPORT[top]:
                bad.append(f"{m} -> {d} ({top} may import only {sorted(MAY_IMPORT[top]) or 'nothing of ours'})")
    return bad


# -- the checks -----------------------------------------------------------------------


@functools.cache
def _ours() -> Graph:
    return import_graph()


def test_no_import_cycles() -> None:
    graph = _ours()
    assert "agent.broker" in graph and "kafka_protocol.messages._runtime" in graph
    assert "kafka_protocol.messages.fetch" not in graph  # generated
    found = describe_cycles(graph)
    assert not found, "import circles (every import counts, TYPE_CHECKING and local ones too):\n" + found


def test_packages_import_only_downward() -> None:
    bad = layering_violations(_ours())
    assert not bad, "imports against DESIGN.md's layering:\n" + "\n".join(bad)


# -- the checker itself, on a tree made for it ------------------------------------------


def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_checker_sees_hidden_and_relative_imports(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n",
            "pkg/b.py": "def f():\n    from . import c\n",
            "pkg/c.py": "from .sub import leaf\n",
            "pkg/sub/__init__.py": "from .. import a\n",
            "pkg/sub/leaf.py": "import pkg.a.nothing_here\n",
            "pkg/gen.py": '"""Generated. Do not edit by hand."""\nfrom pkg import a\n',
            "pkg/d.py": "from pkg import gen, e\nimport os\n",
            "pkg/e.py": "",
        },
    )
    graph = import_graph(tmp_path, ["pkg"])
    assert graph["pkg.a"] == {"pkg.b"}  # TYPE_CHECKING
    assert graph["pkg.b"] == {"pkg.c"}  # function-local, relative, submodule by name
    assert graph["pkg.c"] == {"pkg.sub.leaf"}
    assert graph["pkg.sub"] == {"pkg.a"}  # ``..`` from a package's __init__
    assert graph["pkg.sub.leaf"] == {"pkg.a"}  # longest known prefix
    assert graph["pkg.d"] == {"pkg.e"}  # the generated module is left out
    assert graph["pkg.e"] == set()  # no implicit edge to the parent package
    assert "pkg.gen" not in graph
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.sub.leaf"]]
    assert cycle_paths(graph, cycles(graph)[0]) == ["pkg.a -> pkg.b -> pkg.c -> pkg.sub.leaf -> pkg.a"]


def test_cycle_paths_cover_every_member() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"b"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycle_paths(graph, ["a", "b", "c"]) == ["a -> b -> a", "c -> b -> c"]
    assert "a -> b -> a" in describe_cycles(graph)


def test_layering_names_the_offending_import() -> None:
    graph = {"metastore.x": {"agent.broker"}, "agent.y": {"metastore.x", "agent.z"}, "agent.z": set()}
    assert layering_violations(graph) == [
        "metastore.x -> agent.broker (metastore may import only nothing of ours)"
    ]
