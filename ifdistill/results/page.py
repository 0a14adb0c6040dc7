"""The results page as data: one row per run, one column per benchmark, deltas, verdicts, reproducibility.

The lab's page, rendered from the runs' files instead of edited by hand. :func:`build_page` returns one
JSON-able dict; report.md, report.csv and report.html render from it (:mod:`ifdistill.results.page_render`).

- **Rows**: the base model's evaluation first (when given), then every run. A row's value in a column is
  the *final* (highest-step) evaluation of the eval section holding that metric (the column's own
  section where it names one: two sections of one benchmark are two columns, never mixed), with the
  evaluator's standard error.
- **Columns**: a :class:`Column` per headline metric; :func:`default_columns` (each benchmark's own) are those of the two
  published tables (IFEval prompt- and instruction-level strict, GSM8K strict-match exact match, MMLU,
  TruthfulQA mc2, CommonsenseQA accuracy). A default column no row has is left out with a note; a column
  asked for by name is always shown. A row without the benchmark shows ``—`` and a note.
- **Eval config**: in each column the evaluations should share one ``eval_config_hash`` (the base's, else
  the most common). A cell with another is marked and kept out of every delta and verdict, never
  compared as if it measured the same thing.
- **Deltas** (row minus reference): paired per prompt / document when both sides have samples.jsonl
  (IFEval: :func:`ifdistill.results.paired.metric_delta`; lm-eval: the task's per-document metric,
  :func:`ifdistill.results.paired.document_delta`), else unpaired ``sqrt(se_a^2 + se_b^2)``. *Flat*:
  ``|delta| < noise_se * se`` (default 2). Beside each, the minimum detectable effect at 80 % power of
  that rule, ``mde = (noise_se + 0.8416) * se`` (:mod:`ifdistill.results.power`).
- **Verdict** (each row against the base; a gain and a regression in each column's better direction,
  :meth:`~ifdistill.benchmarks.base.Benchmark.is_higher_better`): a gain in the gain column (default IFEval prompt strict)
  beyond the threshold and no other column down beyond it -> ``wins``; the gain with such a regression ->
  ``forgetting``. Without a gain: ``no clear gain`` when the gain column's MDE is at most the target
  effect (``target_effect``, default 5 points for a column of fractions: the size of the differences the
  published comparisons argue about), noted "could have detected >= MDE"; ``underpowered`` when it is
  larger ("effects under MDE points are invisible here"). A gain whose other columns are partly missing
  (or evaluated with another eval config) and show no regression is an ``unverified gain``, never a win;
  the columns a row lacks are named beside the verdict.
- **Seed groups** (runs equal but for the seed) of two or more seeds: the difference of the group's mean
  from the base in every column, with a standard error that counts the spread across seeds as well as
  the prompts' (:func:`ifdistill.results.power.crossed`, :func:`ifdistill.results.seed_groups.group_delta`),
  its MDE and the same verdict rule on it.
- **Reproducibility**: runs sharing config_hash, data manifest and seed (re-runs of one setup) must agree
  within noise in every column; a pair that does not is flagged.
- **Sweep curves**: per seed group (runs equal but for the seed: one swept value) and column, the mean
  over the group's seeds at every evaluated step with the standard error of that mean (sd / sqrt(n);
  none for one seed), so the in-training trade-off of every benchmark is one picture. Only evaluations
  with the column's eval_config_hash enter a mean (a judge's number moves with its model, template and
  reference): the others are named in a note, never averaged in.
- **Judge columns**: ``judge:win_rate`` (pairwise) or ``judge:score_mean`` (absolute) by ``--columns``,
  e.g. ``--columns "Judge win rate=judge:win_rate"``; like every column, one eval_config_hash per column.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ifdistill.benchmarks import registry
from ifdistill.evaluator import output as eval_output
from ifdistill.results import paired, power, seed_groups
from ifdistill.results.verdicts import target_effect, verdict
from ifdistill.results.runs import Evaluation, Run, data_manifest_digest, evaluations_of, read_evaluation

@dataclasses.dataclass(frozen=True)
class Column:
    """A headline metric: ``benchmark`` (a registered name, :mod:`ifdistill.benchmarks.registry`) and the
    metric's name in that benchmark's results.json ``metrics``; ``section``: the runs' eval section it reads
    (``eval`` or an extra section's name; None: the first section of the benchmark that has the metric). A
    stand-alone evaluation (the base model) fills every column of its benchmark."""

    label: str
    benchmark: str
    metric: str
    section: str | None = None


def default_columns() -> tuple[Column, ...]:
    """Every benchmark's default page columns (:attr:`~ifdistill.benchmarks.base.Benchmark.page_columns`),
    the default benchmark's first."""
    return tuple(Column(label, b.name, metric) for b in registry.ordered() for label, metric in b.page_columns)


def parse_column(spec: str) -> Column:
    """``[LABEL=][BENCHMARK[@SECTION]:]METRIC``; without a benchmark, the first benchmark that claims the
    metric's name (:func:`ifdistill.benchmarks.registry.claiming`)."""
    label, sep, rest = spec.partition("=")
    if not sep:
        label, rest = "", spec
    bench, sep, metric = rest.partition(":")
    if not sep:
        bench, metric = (registry.claiming(rest) or ""), rest
    bench, _, section = bench.partition("@")
    if bench not in registry.names() or not metric:
        raise ValueError(f"--columns {spec!r}: expected [LABEL=][{'|'.join(registry.names())}[@SECTION]:]METRIC")
    return Column(label or metric, bench, metric, section or None)


@dataclasses.dataclass
class PageOptions:
    columns: tuple[Column, ...] | None = None  # None: default_columns() that some row has
    noise_se: float = paired.NOISE_SE  # a difference under this many standard errors is flat
    gain_column: str | None = None  # label of the verdict's gain column; default the first IFEval column
    compare: tuple[tuple[str, str], ...] = ()  # (row, reference row); default every row against the first
    # the verdict's line between "no clear gain" and "underpowered", in the gain column's display unit
    # (percentage points for fractions); None: verdicts.DEFAULT_TARGET_POINTS for fractions, else no line
    target_effect: float | None = None


@dataclasses.dataclass
class PageRow:
    name: str
    kind: str  # "base", "run" or "eval"
    run: Run | None
    evaluations: dict[str, list[Evaluation]]


def _section(row: PageRow, column: Column) -> str | None:
    """The eval section of ``row`` that fills ``column`` (see :class:`Column`), None if none does."""
    for section, evals in row.evaluations.items():
        if column.section is not None and row.kind == "run" and section != column.section:
            continue
        if any(e.benchmark == column.benchmark and column.metric in e.metrics for e in evals):
            return section
    return None


def _cell(row: PageRow, column: Column) -> dict[str, Any] | None:
    section = _section(row, column)
    if section is not None:
        final = row.evaluations[section][-1]
        if final.benchmark == column.benchmark and column.metric in final.metrics:
            return {"value": final.metrics[column.metric], "se": final.metrics.get(f"{column.metric}_stderr"),
                    "step": final.step, "section": section, "eval_config_hash": final.eval_config_hash,
                    "results_dir": str(final.results_dir) if final.results_dir else None, "mismatch": False}
    return None


class _Samples:
    """Per-document values, read once per evaluation directory through the one output reader."""

    def __init__(self) -> None:
        self._rows: dict[str, Any] = {}  # per-prompt decisions
        self._docs: dict[str, Any] = {}  # samples.jsonl's rows as written

    def prompts(self, results_dir: str | None):
        if results_dir is None or not (Path(results_dir) / eval_output.SAMPLES_FILE).is_file():
            return None
        if results_dir not in self._rows:
            self._rows[results_dir] = eval_output.read_samples(results_dir)
        return self._rows[results_dir]

    def documents(self, results_dir: str | None, column: Column) -> dict[str, float] | None:
        if results_dir is None or not (Path(results_dir) / eval_output.SAMPLES_FILE).is_file():
            return None
        if results_dir not in self._docs:
            self._docs[results_dir] = list(eval_output.iter_sample_rows(results_dir))
        return registry.get(column.benchmark).document_values(self._docs[results_dir], column.metric)

    def outcomes(self, results_dir: str | None, column: Column) -> power.Outcomes | None:
        """``{key: (followed, counted)}`` of ``column``'s metric per prompt or document (``(value, 1)``)."""
        if registry.get(column.benchmark).prompt_decisions:
            prompts = self.prompts(results_dir)
            return paired.outcomes(column.metric, prompts) if prompts else None
        docs = self.documents(results_dir, column)
        return {k: (v, 1) for k, v in docs.items()} if docs else None


def _delta(column: Column, a: dict | None, b: dict | None, samples: _Samples, threshold: float) -> dict[str, Any]:
    """``a`` minus ``b`` in one column; ``refused`` names why there is no delta."""
    if a is None or b is None:
        return {"refused": "missing"}
    if a["mismatch"] or b["mismatch"] or a["eval_config_hash"] != b["eval_config_hash"]:
        return {"refused": "eval config differs"}
    if registry.get(column.benchmark).is_prompt_decision(column.metric):
        metrics_a = {column.metric: a["value"], f"{column.metric}_stderr": a["se"]}
        metrics_b = {column.metric: b["value"], f"{column.metric}_stderr": b["se"]}
        d = paired.metric_delta(column.metric, metrics_a, samples.prompts(a["results_dir"]), metrics_b,
                                samples.prompts(b["results_dir"]), threshold)
        return paired.judged(d["delta"], d["se"], d["se_kind"], d["n"], threshold)
    docs_a, docs_b = samples.documents(a["results_dir"], column), samples.documents(b["results_dir"], column)
    d = paired.document_delta(docs_a, docs_b) if docs_a and docs_b else None
    if d is not None:
        return paired.judged(d["delta"], d["se"], "paired", d["n"], threshold)
    se = (a["se"] ** 2 + b["se"] ** 2) ** 0.5 if a["se"] is not None and b["se"] is not None else None
    return paired.judged(a["value"] - b["value"], se, "unpaired", 0, threshold)


def _mark_eval_configs(columns: Sequence[Column], cells: dict, base: str | None, notes: list[str]) -> dict[str, Any]:
    """Mark the cells whose eval_config_hash differs from their column's; returns the column's hash."""
    chosen = {}
    for col in columns:
        present = {name: c for name, c in cells.items() if c.get(col.label) is not None}
        hashes = collections.Counter(c[col.label]["eval_config_hash"] for c in present.values())
        if not hashes:
            chosen[col.label] = None
            continue
        ref = present[base][col.label]["eval_config_hash"] if base in present else hashes.most_common(1)[0][0]
        chosen[col.label] = ref
        for name, c in present.items():
            if c[col.label]["eval_config_hash"] != ref:
                c[col.label]["mismatch"] = True
                notes.append(f"{col.label}: {name} was evaluated with eval_config_hash "
                             f"{c[col.label]['eval_config_hash']}, not the column's {ref}; marked ‡ and "
                             "left out of deltas and verdicts")
    return chosen


def _reproducibility(rows: Sequence[PageRow], reruns: Sequence[Run], columns: Sequence[Column],
                     samples: _Samples, threshold: float) -> dict[str, dict[str, Any]]:
    """Per reported run with re-runs: ``{n, differs: [...], status}`` (see the module docstring)."""
    def key(run: Run):
        return (run.config_hash, data_manifest_digest(run), run.seed)

    out = {}
    for row in rows:
        if row.run is None or row.kind != "run" or not row.run.config_hash:
            continue
        others = [r for r in reruns if r.kind == "run" and key(r) == key(row.run)]
        if not others:
            continue
        differs = []
        for other in others:
            other_row = PageRow(other.name, "run", other, evaluations_of(other))
            for col in columns:
                d = _delta(col, _cell(row, col), _cell(other_row, col), samples, threshold)
                if not d.get("refused") and d["flat"] is False:
                    differs.append({"other": str(other.path), "column": col.label, "delta": d["delta"], "se": d["se"]})
        out[row.name] = {"n": 1 + len(others), "differs": differs,
                         "status": "DIFFERS" if differs else "reproduced"}
    return out


def _sweep_curves(rows: Sequence[PageRow], columns: Sequence[Column], labels: dict[str, str],
                  column_hash: dict[str, str | None], notes: list[str]) -> list[dict]:
    """``[{group, label, runs, columns: {label: [{step, mean, se, n}]}}]`` per seed group (module docstring).
    Only evaluations with the column's eval_config_hash are averaged; the others are named in ``notes``."""
    out = []
    for group, members in group_rows(rows).items():
        curves = {}
        for col in columns:
            by_step: dict[int, list[float]] = {}
            left_out: set[str] = set()
            for r in members:
                section = _section(r, col)
                for evals in [r.evaluations[section]] if section is not None else []:
                    for e in evals:
                        if e.benchmark != col.benchmark or col.metric not in e.metrics or e.step is None:
                            continue
                        if column_hash.get(col.label) not in (None, e.eval_config_hash):
                            left_out.add(r.name)
                            continue
                        by_step.setdefault(e.step, []).append(e.metrics[col.metric])
            curves[col.label] = [{"step": step, "mean": sum(v) / len(v), "n": len(v),
                                  "se": (sum((x - sum(v) / len(v)) ** 2 for x in v) / (len(v) - 1) / len(v)) ** 0.5
                                  if len(v) > 1 else None} for step, v in sorted(by_step.items())]
            if left_out:
                notes.append(f"{col.label} curve: {', '.join(sorted(left_out))} evaluated with another eval_config_hash "
                             f"than the column's {column_hash[col.label]}; left out of the mean, never averaged in")
        out.append({"group": group, "label": labels.get(group) or group[:10], "runs": [m.name for m in members],
                    "columns": curves})
    return out


# -- read by the forgetting analyses (ifdistill.results.tradeoff, format_task): the page's own rules --
Samples, column_delta, cell = _Samples, _delta, _cell


def group_rows(rows: Sequence[PageRow]) -> dict[str, list[PageRow]]:
    """The run rows of each seed group (runs equal but for the seed), in order of first appearance."""
    groups: dict[str, list[PageRow]] = {}
    for r in rows:
        if r.run is not None and r.kind == "run":
            groups.setdefault(r.run.group_hash, []).append(r)
    return groups


def _seed_groups(rows: Sequence[PageRow], columns: Sequence[Column], cells: dict, base: str, gain: Column | None,
                 samples: _Samples, options: PageOptions, labels: dict[str, str]) -> list[dict[str, Any]]:
    """Every seed group of two or more seeds against the base: per column the delta of its mean, its
    seed-aware standard error and MDE (:func:`ifdistill.results.seed_groups.group_delta`), and the verdict."""
    out = []
    for group, members in group_rows(rows).items():
        if len(members) < 2:
            continue
        deltas = {c.label: seed_groups.group_delta([cells[m.name][c.label] for m in members], cells[base][c.label],
                                                   lambda d, c=c: samples.outcomes(d, c), options.noise_se)
                  for c in columns}
        out.append({"group": group, "label": labels.get(group) or group[:10], "runs": [m.name for m in members],
                    "seeds": [m.run.seed for m in members], "columns": deltas,
                    "verdict": verdict(columns, gain, deltas, options.target_effect) if gain else None})
    return out


def page_rows(runs: Sequence[Run], base: Sequence[Path] | None) -> list[PageRow]:
    """The base row (one evaluation per directory of ``base``), then a row per run."""
    rows = []
    if base:
        evals = {f"eval{i}" if i else "eval": [read_evaluation("eval", None, {}, Path(p))] for i, p in enumerate(base)}
        rows.append(PageRow("base", "base", None, evals))
    return rows + [PageRow(r.name, r.kind, r, evaluations_of(r)) for r in runs]


def select_columns(rows: Sequence[PageRow], asked: Sequence[Column] | None, notes: list[str]) -> list[Column]:
    """The columns asked for, else the default columns some row has (a note names those left out)."""
    if asked is not None:
        return list(asked)
    defaults = default_columns()
    columns = [c for c in defaults if any(_cell(r, c) for r in rows)]
    left = [c.label for c in defaults if c not in columns]
    if left:
        notes.append(f"default column(s) no row has, left out: {', '.join(left)}")
    return columns


def build_page(runs: Sequence[Run], base: Sequence[Path] | None = None, options: PageOptions | None = None,
               reruns: Sequence[Run] = (), labels: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The page from loaded runs; ``base``: the base model's evaluator output directories (one per
    benchmark); ``reruns``: the re-runs :func:`ifdistill.results.runs.load_all` left out; ``labels``:
    a name per seed group (its swept values) for the curves. None when no row has any default column
    (e.g. an IFBench-only report without ``--columns``)."""
    options = options or PageOptions()
    notes: list[str] = []
    rows = page_rows(runs, base)
    columns = select_columns(rows, options.columns, notes)
    if not columns and options.columns is None:
        return None
    if not columns:
        raise ValueError("results page: no column to show (no row has any of the columns asked for)")
    cells = {r.name: {c.label: _cell(r, c) for c in columns} for r in rows}
    for r in rows:
        for c in columns:
            if cells[r.name][c.label] is None:
                notes.append(f"{r.name}: no {c.label} ({c.benchmark} {c.metric}) evaluation — shown as —")
    base_name = "base" if base else None
    column_hash = _mark_eval_configs(columns, cells, base_name, notes)
    samples = _Samples()
    pairs = list(options.compare) or [(r.name, rows[0].name) for r in rows[1:]]
    names = {r.name for r in rows}
    for a, b in pairs:
        for n in (a, b):
            if n not in names:
                raise KeyError(f"--compare: no row named {n!r}; have: {', '.join(r.name for r in rows)}")
    deltas = [{"row": a, "reference": b,
               "columns": {c.label: _delta(c, cells[a][c.label], cells[b][c.label], samples, options.noise_se)
                           for c in columns}} for a, b in pairs]
    gain = next((c for c in columns if c.label == options.gain_column), None) if options.gain_column else \
        next((c for c in columns if registry.get(c.benchmark).default), None)
    if options.gain_column and gain is None:
        raise KeyError(f"--gain-column {options.gain_column!r} is not a column: {', '.join(c.label for c in columns)}")
    verdicts = {}
    if base_name and gain is not None:
        for r in rows[1:]:
            against = {c.label: _delta(c, cells[r.name][c.label], cells[base_name][c.label], samples, options.noise_se)
                       for c in columns}
            verdicts[r.name] = verdict(columns, gain, against, options.target_effect)
    elif gain is None:
        notes.append(f"no {registry.get(registry.default_name()).display} column: no verdicts")
    repro = _reproducibility(rows, reruns, columns, samples, options.noise_se)
    groups = _seed_groups(rows, columns, cells, base_name, gain, samples, options, labels or {}) if base_name else []
    return {
        "options": {"noise_se": options.noise_se, "gain_column": gain.label if gain else None,
                    "target_effect": target_effect(gain, options.target_effect),
                    "mde_multiplier": power.multiplier(options.noise_se)},
        "columns": [{**dataclasses.asdict(c), "eval_config_hash": column_hash[c.label],
                     "fraction": registry.get(c.benchmark).is_fraction(c.metric),
                     "higher_is_better": registry.get(c.benchmark).is_higher_better(c.metric)} for c in columns],
        "base": base_name,
        "rows": [{"name": r.name, "kind": r.kind, "method": r.run.method if r.run else "base",
                  "config_hash": r.run.config_hash if r.run else None,
                  "seed_group": r.run.group_hash if r.run else None, "seed": r.run.seed if r.run else None,
                  "cells": cells[r.name], "verdict": verdicts.get(r.name), "repro": repro.get(r.name)}
                 for r in rows],
        "deltas": deltas,
        "seed_groups": groups,
        "curves": _sweep_curves(rows, columns, labels or {}, column_hash, notes),
        "notes": notes,
    }

