"""Every ``from ifdistill... import name`` in bench/ resolves, the lazy ones inside functions included.

The benchmarks import most of ifdistill inside ``main()`` (so ``--help`` stays fast), where a moved
class only shows after minutes of training: ``bench_checkpoint_eval.py`` once imported ``LocalRunner``
from the module it had left and failed after its three training runs."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _imports(path: Path) -> list[tuple[int, str, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [(node.lineno, node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
            and node.module.split(".")[0] in ("ifdistill", "tests") for alias in node.names]


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_every_ifdistill_import_of_a_benchmark_resolves(path):
    missing = []
    for line, module, name in _imports(path):
        try:
            mod = importlib.import_module(module)
        except ImportError as err:
            missing.append(f"{path.name}:{line}: {module} ({err})")
            continue
        if name != "*" and not hasattr(mod, name):
            try:
                importlib.import_module(f"{module}.{name}")  # a submodule
            except ImportError:
                missing.append(f"{path.name}:{line}: {module} has no {name}")
    assert not missing, missing
