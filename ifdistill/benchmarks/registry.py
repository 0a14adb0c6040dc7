"""The registry every consumer of a result asks: a benchmark by the name results.json records.

The evaluator core, the W&B logging, ``ifdistill-wandb-view``, ``ifdistill-status`` and the readers of
results.json ask :func:`get` by the name results.json records (``config.eval.benchmark``) and never
branch on a name.

Registration: every folder of :data:`~ifdistill.benchmarks.base.HOME` with a ``benchmark`` module is a
benchmark; importing that module calls :func:`register` with an instance of its
:class:`~ifdistill.benchmarks.base.Benchmark` subclass. Adding a benchmark is one folder
(``ifdistill/benchmarks/<name>/benchmark.py``) and one config (``conf/eval/<name>.yaml``); a test (or a
plug-in) may also call :func:`register` with an instance of its own. The folders are found by listing the
home, so this module imports none of them: the benchmarks import the registry, never the other way.
Importing this module is cheap, and so is finding the benchmarks: their registration modules import
their engines (lm-eval, the judge's backend) and the evaluator's plan only when an evaluation runs, so the
instruction scorer asks the registry for every benchmark's checkers
(:func:`ifdistill.benchmarks.instruction_following.lookup.all_instructions`).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ifdistill.benchmarks.base import HOME, Benchmark

_HOME_DIR = Path(__file__).parent
_REGISTRY: dict[str, Benchmark] = {}
_DISCOVERED = False


def register(benchmark: Benchmark) -> Benchmark:
    """Make ``benchmark`` known by its name (a second registration of a name replaces the first)."""
    if not benchmark.name:
        raise ValueError(f"{type(benchmark).__name__}: a benchmark needs a name")
    _REGISTRY[benchmark.name] = benchmark
    return benchmark


def unregister(name: str) -> None:
    """Forget a registration (tests that register their own)."""
    _REGISTRY.pop(name, None)


def subpackage_modules(module: str) -> list[Any]:
    """``ifdistill.benchmarks.<folder>.<module>`` of every folder of :data:`HOME` that has one (a benchmark's
    folder), imported, in name order."""
    out = []
    for info in sorted(pkgutil.iter_modules([str(_HOME_DIR)]), key=lambda i: i.name):
        if info.ispkg and importlib.util.find_spec(f"{HOME}.{info.name}.{module}") is not None:
            out.append(importlib.import_module(f"{HOME}.{info.name}.{module}"))
    return out


def _discover() -> None:
    global _DISCOVERED
    if not _DISCOVERED:
        subpackage_modules("benchmark")  # importing each registers it
        _DISCOVERED = True


def names() -> list[str]:
    """Every registered benchmark's name (sorted)."""
    _discover()
    return sorted(_REGISTRY)


def default_name() -> str:
    """The benchmark an eval section or a results.json without ``benchmark`` belongs to."""
    _discover()
    return next(b.name for b in _REGISTRY.values() if b.default)


class UnknownBenchmarkError(KeyError):
    """No registration of that name; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


def get(name: Optional[str]) -> Benchmark:
    """The benchmark registered as ``name`` (the default one for ``None`` or empty)."""
    _discover()
    if not name:
        return _REGISTRY[default_name()]
    if name not in _REGISTRY:
        raise UnknownBenchmarkError(f"unknown benchmark {name!r} (known: {sorted(_REGISTRY)})")
    return _REGISTRY[name]


def benchmark_of(results: Mapping[str, Any]) -> str:
    """The benchmark a results.json belongs to (``config.eval.benchmark``; the default one when absent)."""
    return ((results.get("config") or {}).get("eval") or {}).get("benchmark") or default_name()


def of_results(results: Mapping[str, Any]) -> Benchmark:
    """The registration that reads ``results``."""
    return get(benchmark_of(results))


def ordered() -> list[Benchmark]:
    """Every registration, the default one first, then by name."""
    _discover()
    return sorted(_REGISTRY.values(), key=lambda b: (not b.default, b.name))


def claiming(metric: str) -> Optional[str]:
    """The first benchmark (:func:`ordered`) that claims a metric named without its benchmark."""
    return next((b.name for b in ordered() if b.claims(metric)), None)


def namespace(section: Optional[str], benchmark: str) -> str:
    """The W&B namespace of an eval section's results (``<namespace>/*`` on ``<namespace>/step``, its per-type
    breakdown ``<namespace>_type/*``): an extra section (``callbacks.checkpoint_eval.evals.<section>``) its
    own name, so two sections of one benchmark never share keys; the run's ``eval`` section (``None``) its
    benchmark's name."""
    return section or benchmark


def namespaces(sections: Mapping[Optional[str], Optional[str]]) -> dict[Optional[str], str]:
    """``{section: namespace}`` of a run's eval sections (``{section: benchmark}``, the run's ``eval`` under
    ``None``); ``ValueError`` naming both where two would share one."""
    out: dict[Optional[str], str] = {}
    for section, bench in sections.items():
        ns = namespace(section, bench or default_name())
        clash = next((s for s, n in out.items() if n == ns), ...)
        if clash is not ...:
            names = " and ".join("eval" if s is None else f"evals.{s}" for s in (clash, section))
            raise ValueError(f"{names} would both log W&B keys {ns}/*: name the extra section differently")
        out[section] = ns
    return out


def of_sections(sections: Sequence[Mapping[str, Any]]) -> list[Benchmark]:
    """The benchmarks of eval sections (each section's ``benchmark``, the default one when unnamed), once each."""
    seen = dict.fromkeys(str(s.get("benchmark") or default_name()) for s in sections)
    return [get(n) for n in seen]
