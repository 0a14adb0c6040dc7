"""The modules of ``ifdistill`` import each other without cycles.

A cycle makes the import order matter (a module can see its partner half-initialised), hides which
layer owns a contract, and is easy to miss when a folder is remapped into the namespace
(``callbacks/`` -> ``ifdistill.callbacks``, ``launchers/`` -> ``ifdistill.launchers``, per
``[tool.setuptools] package-dir`` in pyproject.toml). The graph is read with :mod:`ast`, without
importing anything: every ``import`` and ``from ... import`` anywhere in a module counts, inside
functions too (they run later, but the dependency is the same); relative imports are resolved, and
``from pkg import name`` where ``pkg.name`` is a module is an import of that submodule. A cycle is a
strongly connected component of more than one module; a module importing itself is not one.

The same holds one level up, between the package's parts (``ifdistill.evaluator``,
``ifdistill.callbacks``, a top-level module such as ``ifdistill.paths``): two folders that import
each other, even through different modules, have no layer order, so neither can be read or tested
without the other. ``ifdistill/benchmarks/`` is a home of plug-ins, not one layer: its interface
(``base``, ``registry``) is at the bottom, below the evaluator, and each benchmark's folder at the top,
above it; so each of its modules and folders is a part of its own (:data:`PLUGIN_HOMES`), and the
interface imports neither the evaluator nor any benchmark's folder.

Between the benchmarks' folders (``ifdistill/benchmarks/<name>/``) the rule is stricter: no benchmark's
folder imports another's, and a shared folder beside them (one without a ``benchmark`` module: the
instruction-checking base) imports none of theirs, so each benchmark reads and tests on its own.
"""

from __future__ import annotations

import ast
import tomllib
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_files(root: Path, package_dir: dict[str, str]) -> dict[str, Path]:
    """Every module's dotted name -> its file, for each ``package -> folder`` of the mapping.

    A nested mapping (``ifdistill.callbacks`` -> ``callbacks``) takes precedence over its parent's
    folder, as setuptools does.
    """
    modules: dict[str, Path] = {}
    for package, folder in sorted(package_dir.items(), key=lambda item: item[0].count(".")):
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of ``from <level dots><name> import`` written in ``module``."""
    if level == 0:
        return name or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` or its longest prefix that is a module of the tree (``None`` if outside it)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module -> the modules of the tree it imports (see the module docstring)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _resolve(module, is_package, node.level, node.module)
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    targets.append(submodule if submodule in modules else source)
            for target in targets:
                known = _known(target, modules)
                if known is not None and known != module:
                    graph[module].add(known)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (no recursion limit)
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(found)


def example_loop(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest import loop through the component's first module, to make the failure readable."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node] & members):
            if child == start:
                loop = [start, node]
                while loop[-1] != start:
                    loop.append(previous[loop[-1]])
                return loop[::-1]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    raise AssertionError(f"not a cycle: {component}")


#: Packages whose modules and folders are each a part of their own (module docstring).
PLUGIN_HOMES = ("ifdistill.benchmarks",)


def part_of(module: str, depth: int = 2, homes: tuple[str, ...] = PLUGIN_HOMES) -> str:
    """The part ``module`` belongs to: its first ``depth`` components, one more inside a plug-in home."""
    inside = next((h for h in homes if module.startswith(f"{h}.")), None)
    return ".".join(module.split(".")[:depth + 1 if inside else depth])


def part_graph(graph: dict[str, set[str]], depth: int = 2, homes: tuple[str, ...] = PLUGIN_HOMES
               ) -> dict[str, set[str]]:
    """The graph between the package's parts (:func:`part_of`)."""
    parts: dict[str, set[str]] = {}
    for module, targets in graph.items():
        part = part_of(module, depth, homes)
        parts.setdefault(part, set()).update(t for t in (part_of(x, depth, homes) for x in targets) if t != part)
    return parts


def describe(graph: dict[str, set[str]], modules: dict[str, set[str]] | None = None) -> str:
    """Each cycle with one loop through it; for a graph of parts, the module imports that make it."""
    lines = []
    for component in cycles(graph):
        lines.append(f"{' <-> '.join(component)}\n    e.g. {' -> '.join(example_loop(graph, component))}")
        if modules is not None:
            members = sorted(component, key=len, reverse=True)  # the longest part a module is in
            member = lambda name: next((m for m in members if name == m or name.startswith(f"{m}.")), None)  # noqa: E731
            lines.extend(
                f"    {module} -> {target}"
                for module in sorted(modules) for target in sorted(modules[module])
                if (a := member(module)) and (b := member(target)) and a != b
            )
    return "\n".join(lines)


def package_dir() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def test_the_package_has_no_import_cycles():
    modules = module_files(ROOT, package_dir())
    graph = import_graph(modules)
    # The graph is the real one: the remapped folders are in it, and their imports are seen.
    assert any(name.startswith("ifdistill.callbacks.") for name in modules)
    assert any(name.startswith("ifdistill.launchers.") for name in modules)
    assert sum(len(targets) for targets in graph.values()) > len(modules)
    assert not cycles(graph), "import cycles among ifdistill's modules:\n" + describe(graph)


def test_the_package_parts_have_no_import_cycles():
    graph = import_graph(module_files(ROOT, package_dir()))
    parts = part_graph(graph)
    assert {"ifdistill.callbacks", "ifdistill.evaluator", "ifdistill.train"} <= set(parts)
    assert not cycles(parts), "import cycles among ifdistill's folders:\n" + describe(parts, graph)


def test_the_benchmark_interface_is_below_the_evaluator():
    graph = import_graph(module_files(ROOT, package_dir()))
    interface = (f"{BENCHMARKS}.base", f"{BENCHMARKS}.registry")
    assert f"{BENCHMARKS}.registry" in graph["ifdistill.evaluator.run"]  # the evaluator builds on it
    upward = sorted(f"{m} -> {t}" for m in interface for t in graph[m]
                    if t.startswith(("ifdistill.evaluator", *(f"{BENCHMARKS}.{f}" for f in _folders(graph)))))
    assert not upward, "the benchmark interface imports what builds on it:\n" + "\n".join(upward)


def _folders(graph: dict[str, set[str]]) -> set[str]:
    return {name.split(".")[2] for name in graph if name.startswith(f"{BENCHMARKS}.") and name.count(".") >= 3}


BENCHMARKS = "ifdistill.benchmarks"


def benchmark_folders(modules: dict[str, Path], home: str = BENCHMARKS) -> set[str]:
    """The folders of ``home`` that are a benchmark's: those with a ``benchmark`` module."""
    depth = home.count(".") + 2
    return {name.rpartition(".")[0] for name in modules
            if name.startswith(f"{home}.") and name.count(".") == depth and name.endswith(".benchmark")}


def cross_benchmark_imports(graph: dict[str, set[str]], home: str = BENCHMARKS) -> list[str]:
    """``module -> target`` for every import into a benchmark's folder from another folder of ``home`` (a
    benchmark's or a shared one) or from ``home``'s own modules."""
    depth = home.count(".") + 2
    own = benchmark_folders({name: Path() for name in graph}, home)
    folder = lambda name: ".".join(name.split(".")[:depth])  # noqa: E731
    return sorted(f"{module} -> {target}" for module, targets in graph.items() if module.startswith(home)
                  for target in targets if folder(target) in own and folder(target) != folder(module))


def test_no_benchmark_imports_another():
    modules = module_files(ROOT, package_dir())
    graph = import_graph(modules)
    # The folders are the real ones: the four benchmarks and the shared base beside them.
    assert {f"{BENCHMARKS}.{n}" for n in ("ifeval", "ifbench", "judge", "lmeval")} <= benchmark_folders(modules)
    assert f"{BENCHMARKS}.instruction_following.instruction_benchmark" in graph[f"{BENCHMARKS}.ifeval.benchmark"]
    assert not cross_benchmark_imports(graph), "imports into a benchmark's folder from another:\n" + "\n".join(
        cross_benchmark_imports(graph))
    inside = {m: {t for t in targets if t.startswith(f"{BENCHMARKS}.")} for m, targets in graph.items()
              if m.startswith(f"{BENCHMARKS}.")}
    folders = part_graph(inside, depth=3, homes=())
    assert not cycles(folders), "import cycles among the benchmarks' folders:\n" + describe(folders, graph)


def test_cross_benchmark_imports_in_a_synthetic_tree_are_reported(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/benchmarks/__init__.py": "",
        "pkg/benchmarks/a/__init__.py": "",
        "pkg/benchmarks/a/benchmark.py": "from pkg.benchmarks.shared import base\n",  # allowed: the shared base
        "pkg/benchmarks/a/checks.py": "def f():\n    from ..b import benchmark\n",  # b's folder, lazily
        "pkg/benchmarks/b/__init__.py": "",
        "pkg/benchmarks/b/benchmark.py": "import pkg.benchmarks.shared.base\n",
        "pkg/benchmarks/shared/__init__.py": "",
        "pkg/benchmarks/shared/base.py": "from pkg.benchmarks.a.checks import f\n",  # the base into a benchmark
        "pkg/core.py": "import pkg.benchmarks.b.benchmark\n",  # outside the benchmarks: test_benchmark_names' concern
    })  # fmt: skip
    modules = module_files(tmp_path, {"pkg": "pkg"})
    assert benchmark_folders(modules, "pkg.benchmarks") == {"pkg.benchmarks.a", "pkg.benchmarks.b"}
    assert cross_benchmark_imports(import_graph(modules), "pkg.benchmarks") == [
        "pkg.benchmarks.a.checks -> pkg.benchmarks.b.benchmark",
        "pkg.benchmarks.shared.base -> pkg.benchmarks.a.checks",
    ]


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_cycles_in_a_synthetic_tree_are_reported(tmp_path):
    _write(tmp_path, {
        "pkg/__init__.py": "",
        # a <-> b: a submodule imported as a name of its package, back through a function-level
        # relative import
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "def f():\n    from .a import thing\n    return thing\n",
        # c <-> ext.d across the remapped folder ext/ (-> pkg.ext), via `import x.y` and `from ..`
        "pkg/c.py": "import pkg.ext.d\n",
        "ext/__init__.py": "",
        "ext/d.py": "from ..c import something\n",
        # not cycles: a self-import, a one-way import, imports from outside the tree
        "pkg/e.py": "import os\nfrom pkg import e\nfrom pkg.a import x\n",
    })  # fmt: skip
    modules = module_files(tmp_path, {"pkg": "pkg", "pkg.ext": "ext"})
    assert set(modules) == {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.e", "pkg.ext", "pkg.ext.d"}
    graph = import_graph(modules)
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.ext.d"]]
    assert example_loop(graph, ["pkg.a", "pkg.b"]) == ["pkg.a", "pkg.b", "pkg.a"]
    assert "pkg.c <-> pkg.ext.d" in describe(graph)
    # between parts: pkg.ext imports pkg.c and back; the package's own modules are one part
    assert cycles(part_graph(graph)) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.ext"]]
    assert "pkg.ext.d -> pkg.c" in describe(part_graph(graph), graph)


def test_an_acyclic_tree_reports_nothing(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "from . import a\n", "pkg/a.py": "from . import b\n", "pkg/b.py": ""})
    graph = import_graph(module_files(tmp_path, {"pkg": "pkg"}))
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": set()}
    assert cycles(graph) == []
