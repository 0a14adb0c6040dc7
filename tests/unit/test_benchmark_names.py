"""No module outside a benchmark's own folders names a benchmark: every consumer asks the registry.

A module *names* a benchmark when its code (docstrings and comments aside) holds a registered name as a
string (``"lmeval"``, ``"judge/step"``, ``"ifeval_type/..."``), imports a benchmark's module, reads a
benchmark's attribute (``settings.judge``) or declares a field of that name. Read with :mod:`ast`, so the
test fails where a consumer starts branching on a name again.

:data:`NOT_YET` lists what still names one, each with the reason; it may only shrink (an entry that no
longer names a benchmark fails the test, so it is removed with the change that fixes it).
"""

from __future__ import annotations

import ast
from pathlib import Path

from ifdistill.benchmarks import registry

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("ifdistill", "callbacks", "launchers")
#: Each benchmark's own folders (``ifdistill/benchmarks/<name>/``: its registration, settings, scorer and checkers),
#: as each registration states them (:meth:`~ifdistill.benchmarks.base.Benchmark.folders`): a new benchmark's
#: folder is found, not listed here. The instruction-checking base IFEval and IFBench share
#: (``ifdistill/benchmarks/instruction_following/``) is no benchmark's: it is scanned like every consumer.
OWN = tuple(sorted({folder for name in registry.names() for folder in registry.get(name).folders()}))
NOT_YET = {
    "ifdistill/data/records.py": "the 'ifeval' row layout of training/eval data (a data schema, not the benchmark)",
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            out.add(id(body[0].value))
    return out


def names_in(path: Path, names: set[str]) -> list[str]:
    """``line: what`` for every place ``path``'s code names one of ``names`` (module docstring)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        found = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if any(node.value == n or node.value.startswith((f"{n}/", f"{n}_type")) for n in names):
                found = repr(node.value)
        elif isinstance(node, ast.Import):
            found = next((a.name for a in node.names if names & set(a.name.split("."))), None)
        elif isinstance(node, ast.ImportFrom):
            dotted = [*(node.module or "").split("."), *(a.name for a in node.names)]
            found = f"from {node.module} import" if names & set(dotted) else None
        elif isinstance(node, ast.Attribute) and node.attr in names:
            found = f".{node.attr}"
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
            found = f"field {node.target.id}"
        if found:
            hits.append(f"{node.lineno}: {found}")
    return hits


def test_only_a_benchmarks_own_folders_name_it():
    names = set(registry.names())
    naming = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(OWN):
                hits = names_in(path, names)
                if hits:
                    naming[rel] = hits
    unexpected = {k: v for k, v in naming.items() if k not in NOT_YET}
    assert not unexpected, f"modules outside a benchmark's folder that name a benchmark: {unexpected}"
    fixed = sorted(set(NOT_YET) - set(naming))
    assert not fixed, f"no longer name a benchmark; remove them from NOT_YET: {fixed}"


def test_the_scan_finds_each_way_of_naming_one(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""ifeval in a docstring is fine."""\nimport ifdistill.benchmarks.lmeval.run\n'
                 'from ifdistill.benchmarks import judge\nx = cfg.judge\nkey = "ifbench/step"\n'
                 'class S:\n    lmeval: int = 0\n# lmeval in a comment is fine\n')
    assert [h.split(":")[0] for h in names_in(f, {"ifeval", "ifbench", "lmeval", "judge"})] == ["2", "3", "4", "5", "7"]


def test_every_benchmark_folder_is_found():
    """The folders come from the registrations: each ``ifdistill/benchmarks/<name>/`` with a ``benchmark``
    module, and the packages a registration states as its own."""
    folders = {f"ifdistill/benchmarks/{m.__name__.split('.')[-2]}/" for m in registry.subpackage_modules("benchmark")}
    assert folders <= set(OWN) and all((ROOT / f).is_dir() for f in OWN)
    assert {f"ifdistill/benchmarks/{n}/" for n in ("ifeval", "ifbench", "judge", "lmeval")} <= set(OWN)
    assert "ifdistill/benchmarks/instruction_following/" not in OWN and (ROOT / "ifdistill/benchmarks/instruction_following").is_dir()
