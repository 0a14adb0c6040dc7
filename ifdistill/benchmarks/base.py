"""What "a benchmark" is: the interface each folder's ``benchmark.py`` subclasses and registers.

A :class:`Benchmark` owns everything that differs between benchmarks: the validation of its config
section, phase 1 and phase 2 on the evaluator's engine (:func:`ifdistill.evaluator.run.prepare` /
``execute`` only dispatch), its metrics (which ones exist, the headline, which direction is better),
its console summary, the columns of its W&B samples table and the W&B panels of its section. Consumers
find a registration by name through :mod:`ifdistill.benchmarks.registry`.

This module and the registry are the bottom of the benchmarks' home: they import no benchmark's folder and
nothing of the evaluator (tests/unit/test_import_graph.py), so the evaluator builds on them and each
benchmark's folder on both.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

#: The package whose folders are the benchmarks (``ifdistill/benchmarks/``, this module's package).
HOME = "ifdistill.benchmarks"


def short_name(metric: str) -> str:
    """A metric as tables and console lines title it (``prompt_level_strict_acc`` -> ``prompt strict``)."""
    return metric.removesuffix("_acc").replace("_level_", " ").replace("_", " ")


def _num(value: Any) -> bool:  # not ifdistill.config's is_num: importing a registration stays free of the config machinery
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Benchmark:
    """One benchmark. Subclasses set the class attributes and override what their results need.

    The defaults fit a benchmark whose results.json ``metrics`` are its own flat ``{name: value,
    name_stderr: se}`` (lm-eval, the judge): every numeric value is a metric, the first is the headline."""

    #: results.json's ``config.eval.benchmark``; the W&B namespace ``<name>/*`` (step ``<name>/step``) of a run's
    #: ``eval`` section of it (:func:`namespace`).
    name: str = ""
    #: How people write it (section titles, page columns).
    display: str = ""
    #: The benchmark an eval section without ``benchmark`` means (exactly one registration sets it).
    default: bool = False
    #: Whether a larger headline is better (the results page's deltas, rankings).
    higher_is_better: bool = True
    #: Aggregates a results.json of this benchmark must hold to be read at all.
    required_metrics: tuple[str, ...] = ()
    #: The results page's default columns ``(label, metric)`` (shown where some row has the metric).
    page_columns: tuple[tuple[str, str], ...] = ()
    #: Whether samples.jsonl rows are per-prompt strict/loose decisions that pair by key
    #: (:func:`ifdistill.evaluator.output.read_samples`); else rows pair per document by their ``metrics``.
    prompt_decisions: bool = False
    #: Whether it scores k responses per prompt (``eval.generation.samples``, reliable@k); else k > 1 is refused.
    samples_per_prompt: bool = False
    #: Whether the metrics are fractions in [0, 1] (tables show them as percentages).
    fractions: bool = False
    #: The offline copy of its rows, relative to the shared data folder (:func:`ifdistill.paths.shared_data_dir`).
    local_data: str = ""
    #: Columns of the W&B samples table (:meth:`sample_row` fills them from a samples.jsonl row).
    sample_columns: tuple[str, ...] = ("key", "prompt", "response")
    #: Packages of its own outside its folder (a plug-in's): they may name it, as its folder may
    #: (tests/unit/test_benchmark_names.py).
    packages: tuple[str, ...] = ()

    def folders(self) -> list[str]:
        """Its folder (``ifdistill/benchmarks/<name>/``, the package of its ``benchmark`` module) and the folders
        of its :attr:`packages`, relative to the repository (``/``-separated, ending in ``/``)."""
        module = type(self).__module__
        own = [module.rpartition(".")[0]] if module.startswith(f"{HOME}.") else []
        return [name.replace(".", "/") + "/" for name in (*own, *self.packages)]

    def local_rows(self) -> Path:
        """The shared offline copy of this benchmark's rows (:attr:`local_data`)."""
        from ifdistill.paths import shared_data_dir

        if not self.local_data:
            raise FileNotFoundError(f"benchmark {self.name!r} has no offline copy of its rows (local_data)")
        return shared_data_dir() / self.local_data

    # -- config ---------------------------------------------------------------------------------------
    def sections(self) -> dict[str, type]:
        """This benchmark's own ``eval`` sections (``{key: settings dataclass}``): ``SECTIONS`` of the
        ``settings`` module in its folder (``ifdistill/benchmarks/<name>/settings.py``), found by itself; none
        without one. Every field of them enters its eval_config_hash (:mod:`ifdistill.evaluator.identity`); a
        section of another benchmark set in its config is refused
        (:func:`~ifdistill.evaluator.settings.eval_settings`)."""
        module = type(self).__module__
        if not module.startswith(f"{HOME}."):
            return {}
        settings = f"{module.rpartition('.')[0]}.settings"
        if importlib.util.find_spec(settings) is None:
            return {}
        return dict(getattr(importlib.import_module(settings), "SECTIONS", {}))

    def check(self, settings: Any) -> None:
        """Validate the parts of :class:`~ifdistill.evaluator.settings.EvalSettings` this benchmark reads;
        raise :class:`~ifdistill.config.ConfigError` naming the key."""

    # -- the evaluator's two phases ---------------------------------------------------------------------
    def prepare(self, settings: Any, run: Any, model_cfg: dict[str, Any], source: Any, *, t0: float) -> Any:
        """Phase 1: every check, rendering and ``eval_config_hash``; a plan (a
        :class:`~ifdistill.evaluator.plan.PlanBase`) whose fingerprint holds only what this benchmark uses."""
        raise NotImplementedError(f"benchmark {self.name!r} does not evaluate")

    def execute(self, plan: Any, backend: Any, *, own: bool, runtime: Optional[dict[str, Any]],
                t0: float) -> dict[str, Any]:
        """Phase 2: generate / score on ``backend`` (closed afterwards when ``own``), publish, return results.json."""
        raise NotImplementedError(f"benchmark {self.name!r} does not evaluate")

    # -- results ---------------------------------------------------------------------------------------
    def metric_values(self, results: Mapping[str, Any]) -> dict[str, float]:
        """Aggregates and their ``<metric>_stderr`` as floats, absent or null values left out."""
        return {k: float(v) for k, v in (results.get("metrics") or {}).items() if _num(v)}

    def headline_metrics(self, results: Mapping[str, Any]) -> list[str]:
        """The metrics a one-line summary shows (the console, ``ifdistill-status``), headline first."""
        return [k for k in self.metric_values(results) if not k.endswith("_stderr")]

    def summary(self, results: Mapping[str, Any]) -> list[str]:
        """``ifdistill-eval``'s lines below the hash: the metrics with standard errors, then the timings."""
        values = self.metric_values(results)
        lines = [f"  {k} {values[k]:.4f}" + (f" ± {values[k + '_stderr']:.4f}" if k + "_stderr" in values else "")
                 for k in self.headline_metrics(results)]
        timings = results.get("timings") or {}
        lines.append("  time: " + "  ".join(f"{k.removesuffix('_s')} {v:.1f}s" for k, v in timings.items()
                                             if k.endswith("_s") and k != "total_s" and _num(v)))
        return lines

    def per_type(self, results: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        """An optional breakdown ``{type: {value name: value}}`` (logged as ``<name>_type/<type>/<value>``)."""
        return {}

    def sample_row(self, row: Mapping[str, Any]) -> list[Any]:
        """One samples.jsonl row as the W&B table's row (:attr:`sample_columns`, in order)."""
        return [str(row.get(c, "")) if c == "key" else row.get(c, "") for c in self.sample_columns]

    def sample_table(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
        """The W&B samples table of samples.jsonl ``rows``: its columns and its rows."""
        return list(self.sample_columns), [self.sample_row(r) for r in rows]

    def document_values(self, rows: Sequence[Mapping[str, Any]], metric: str) -> Optional[dict[str, float]]:
        """``{key: value}`` of ``metric`` per document of samples.jsonl ``rows`` (each row's ``metrics``), for
        paired differences (:func:`ifdistill.results.paired.document_delta`); None where no row holds it."""
        values = {str(r["key"]): float(r["metrics"][metric]) for r in rows
                  if _num((r.get("metrics") or {}).get(metric))}
        return values or None

    def score_responses(self, rows: Sequence[Mapping[str, Any]], responses: Sequence[str]
                        ) -> tuple[list[dict[str, Any]], dict[str, float]]:
        """Score free responses to this benchmark's data ``rows`` outside an evaluation (the LoRA load-path
        check): per-row fields (``strict_prompt``...) and the aggregates of :meth:`headline_metrics`."""
        raise NotImplementedError(f"benchmark {self.name!r} does not score free responses")

    def is_fraction(self, metric: str) -> bool:
        """Whether ``metric`` is a fraction in [0, 1]: the results page shows it in percent and its deltas in
        percentage points, any other metric in its own unit (a mean word count stays a count). Default
        :attr:`fractions`; a benchmark whose metrics mix both says which."""
        return self.fractions

    def is_prompt_decision(self, metric: str) -> bool:
        """Whether ``metric`` is made of samples.jsonl's per-prompt strict/loose decisions, so a paired difference
        reads those (:func:`ifdistill.results.paired.metric_delta`); any other metric pairs on each document's
        own value (:meth:`document_values`). Default :attr:`prompt_decisions`."""
        return self.prompt_decisions

    def is_higher_better(self, metric: str) -> bool:
        """Whether a larger ``metric`` is better (the page's verdicts, rankings). Default :attr:`higher_is_better`."""
        return self.higher_is_better

    def claims(self, metric: str) -> bool:
        """Whether a metric named without its benchmark (``--columns``, a metrics.json entry without
        ``benchmark``) is this benchmark's."""
        return False

    # -- the contract test (tests/integration/test_benchmark_contract.py) ----------------------------------
    def smoke_overrides(self, workdir: Path) -> list[str]:
        """``ifdistill-eval`` overrides that evaluate this benchmark on the tiny model in seconds (its config,
        a few rows or documents, a few new tokens); ``workdir`` may receive local data it needs. Every
        registration states one, so the contract test runs it through every consumer of a result."""
        raise NotImplementedError(f"benchmark {self.name!r} states no smoke evaluation (smoke_overrides)")

    # -- the W&B view ----------------------------------------------------------------------------------
    def panel_metrics(self, section: Mapping[str, Any]) -> list[str]:
        """The metrics (without the ``<name>/`` prefix) an eval ``section`` of this benchmark logs and the
        view plots against the section's ``<namespace>/step``, headline first; known from the config alone."""
        return []

    def type_ids(self, section: Mapping[str, Any]) -> list[str]:
        """The per-type breakdown's keys the view shows in one bar panel (none: no such panel)."""
        return []

    #: The per-type value the bar panel shows, and what a type is called.
    type_value: str = ""
    type_label: str = "type"
