"""Differences between two evaluations of the same prompts, with the right standard error and tests.

Why paired: two checkpoints evaluated on the same 541 prompts are strongly correlated -- most prompts
pass or fail for both. The unpaired standard error of a difference, ``sqrt(se_a^2 + se_b^2)``, ignores
that and calls real differences noise; the paired one uses the per-prompt differences.

Standard error of a difference (the one the "under 2 standard errors" flag uses):

- **paired** (both evaluations have samples.jsonl; prompts matched by key): with ``d_i`` the
  per-prompt difference of followed counts (prompt level: ``x_i - y_i`` in {-1, 0, 1}; instruction
  level: ``y_ai - y_bi``) and ``m_i`` the prompt's instruction count (1 at prompt level),
  ``se = sqrt(n/(n-1) * sum (d_i - delta m_i)^2) / sum m_i``. That is the scorer's cluster-robust
  ratio standard error (:func:`ifdistill.statistics.clustered_ratio_stderr`) applied to ``d_i``; at
  prompt level it is the sample standard deviation of ``d_i`` over ``sqrt(n)``.
- **unpaired** (a side lacks samples): ``sqrt(se_a^2 + se_b^2)`` from the two results.json files.

A benchmark without per-prompt decisions (lm-eval, the judge) pairs its documents by key on each
document's own value of the metric (:meth:`~ifdistill.benchmarks.base.Benchmark.document_values`,
:func:`document_delta`), else falls back to the unpaired standard error.

Every delta carries its minimum detectable effect at 80 % power for the "under 2 standard errors" rule,
``mde`` = (2 + 0.8416) x se (:mod:`ifdistill.results.power`).

Tests (prompt level, strict and loose, benchmarks with per-prompt decisions): McNemar's exact test on
the pass/fail vectors and a paired bootstrap percentile interval of the difference -- both from
:mod:`ifdistill.statistics`.
Sign convention everywhere: ``delta = run - reference``; "gained" prompts fail in the reference and
pass in the run, "lost" prompts the reverse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ifdistill.benchmarks import registry
from ifdistill.benchmarks.base import Benchmark
from ifdistill.statistics import clustered_ratio_stderr, mcnemar_exact, paired_bootstrap
from ifdistill.evaluator.output import MODES, PromptResult, paired_samples
from ifdistill.results.power import NOISE_SE, mde


def _level_mode(metric: str) -> tuple[str, str]:
    level, _, mode = metric.removesuffix("_acc").partition("_level_")
    return level, mode


def within_noise(delta: float, se: float | None, threshold: float = NOISE_SE) -> bool | None:
    """``|delta| < threshold * se`` (default 2 se; a zero delta counts as noise even when se is 0, e.g.
    identical runs); ``None`` when no standard error is known."""
    if se is None or math.isnan(se):
        return None if delta != 0 else True
    return delta == 0 or abs(delta) < threshold * se


def judged(delta: float, se: float | None, se_kind: str, n: int, threshold: float = NOISE_SE,
           **extra: Any) -> dict[str, Any]:
    """A delta as the results page keeps it: ``{delta, se, se_kind, n, flat, mde, refused: None}``, flat
    under ``threshold`` standard errors (:func:`within_noise`), with its MDE."""
    return {"delta": delta, "se": se, "se_kind": se_kind, "n": n, "flat": within_noise(delta, se, threshold),
            "mde": mde(se, threshold), "refused": None, **extra}


def document_delta(run_values: Mapping[str, float], ref_values: Mapping[str, float]) -> dict[str, Any] | None:
    """Paired difference of a per-document metric (lm-eval's samples.jsonl ``metrics``), documents
    matched by key: ``{run, reference, delta, se, n}`` over the documents both sides scored, with the
    standard error of the mean per-document difference (sample sd over sqrt(n)); None under 2 pairs."""
    keys = [k for k in run_values if k in ref_values]
    if len(keys) < 2:
        return None
    a = [float(run_values[k]) for k in keys]
    b = [float(ref_values[k]) for k in keys]
    d = [x - y for x, y in zip(a, b)]
    return {"run": sum(a) / len(a), "reference": sum(b) / len(b), "delta": sum(d) / len(d),
            "se": clustered_ratio_stderr(d, [1] * len(d)), "n": len(keys)}


def outcome(metric: str, result: PromptResult) -> tuple[int, int]:
    """One prompt's ``(followed, counted)`` of a per-prompt-decision metric: ``(0 or 1, 1)`` at prompt
    level, ``(instructions followed, instructions)`` at instruction level."""
    level, mode = _level_mode(metric)
    if level == "prompt":
        return int(result.prompt(mode)), 1
    return sum(result.inst(mode)), len(result.inst(mode))


def outcomes(metric: str, samples: Sequence[PromptResult]) -> dict[str, tuple[int, int]]:
    """``{prompt key: (followed, counted)}`` of one evaluation (:func:`outcome`), for the seed groups' and
    the planner's estimates (:mod:`ifdistill.results.power`)."""
    return {str(r.key): outcome(metric, r) for r in samples}


def _paired_metric(metric: str, run: Sequence[PromptResult], ref: Sequence[PromptResult]
                   ) -> tuple[float, float, float, float]:
    """``(run value, reference value, delta, paired se)`` computed from aligned samples."""
    a, m = zip(*(outcome(metric, r) for r in run))
    b = [outcome(metric, r)[0] for r in ref]
    total = sum(m)
    d = [x - y for x, y in zip(a, b)]
    return sum(a) / total, sum(b) / total, sum(d) / total, clustered_ratio_stderr(d, m)


def metric_delta(metric: str, run_metrics: Mapping[str, Any], run_samples: Sequence[PromptResult] | None,
                 ref_metrics: Mapping[str, Any], ref_samples: Sequence[PromptResult] | None,
                 threshold: float = NOISE_SE) -> dict[str, Any]:
    """One metric of per-prompt decisions (IFEval's four): ``{run, reference, delta, se, se_kind,
    within_2se, n}``, paired by prompt key when both sides have samples, else unpaired."""
    run_al, ref_al = ([], [])
    if run_samples is not None and ref_samples is not None:
        run_al, ref_al = paired_samples(run_samples, ref_samples)
    if len(run_al) < 2:
        return unpaired_delta(metric, run_metrics, ref_metrics, threshold)
    a, b, delta, se = _paired_metric(metric, run_al, ref_al)
    return {"run": a, "reference": b, "delta": delta, "se": se, "se_kind": "paired",
            "within_2se": within_noise(delta, se, threshold), "mde": mde(se, threshold), "n": len(run_al)}


def unpaired_delta(metric: str, run_metrics: Mapping[str, Any], ref_metrics: Mapping[str, Any],
                   threshold: float = NOISE_SE) -> dict[str, Any]:
    """``run - reference`` of one metric from the two aggregates, se ``sqrt(se_a^2 + se_b^2)``; a side
    without the metric gives ``se_kind`` ``missing`` and no delta."""
    if run_metrics.get(metric) is None or ref_metrics.get(metric) is None:
        return {"run": run_metrics.get(metric), "reference": ref_metrics.get(metric), "delta": None,
                "se": math.nan, "se_kind": "missing", "within_2se": None, "mde": None, "n": 0}
    a, b = float(run_metrics[metric]), float(ref_metrics[metric])
    se_a, se_b = run_metrics.get(f"{metric}_stderr"), ref_metrics.get(f"{metric}_stderr")
    se = math.sqrt(se_a**2 + se_b**2) if se_a is not None and se_b is not None else math.nan
    return {"run": a, "reference": b, "delta": a - b, "se": se, "se_kind": "unpaired",
            "within_2se": within_noise(a - b, se, threshold), "mde": mde(se, threshold), "n": 0}


def _document_metric(bench: Benchmark, metric: str, run_metrics: Mapping[str, Any],
                     run_rows: Sequence[Mapping[str, Any]] | None, ref_metrics: Mapping[str, Any],
                     ref_rows: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """One metric of a benchmark without per-prompt decisions: paired over its documents when both sides
    have per-document values of it, else unpaired."""
    docs_a = bench.document_values(run_rows, metric) if run_rows else None
    docs_b = bench.document_values(ref_rows, metric) if ref_rows else None
    d = document_delta(docs_a, docs_b) if docs_a and docs_b else None
    if d is None:
        return unpaired_delta(metric, run_metrics, ref_metrics)
    return {**d, "se_kind": "paired", "within_2se": within_noise(d["delta"], d["se"]), "mde": mde(d["se"])}


def _documents(samples: Sequence[PromptResult] | None) -> list[dict[str, Any]] | None:
    """Per-prompt decisions as the document rows :meth:`~ifdistill.benchmarks.base.Benchmark.document_values`
    reads (each prompt's own metric values)."""
    return None if samples is None else [{"key": r.key, "metrics": dict(r.values)} for r in samples]


def compare(run_metrics: Mapping[str, Any], run_samples: Sequence[Any] | None,
            ref_metrics: Mapping[str, Any], ref_samples: Sequence[Any] | None, *, benchmark: str | None = None,
            metrics: Sequence[str] | None = None, n_resamples: int = 10000, seed: int = 0,
            confidence: float = 0.95) -> dict[str, Any]:
    """Deltas of ``metrics`` (default: the benchmark's :meth:`~ifdistill.benchmarks.base.Benchmark.
    headline_metrics`) of one benchmark (run - reference) with standard errors, flags and tests.
    ``*_samples``: per-prompt decisions where the benchmark has them, else samples.jsonl's rows.

    Returns ``{"paired": bool, "n_paired": int, "metrics": {name: {run, reference, delta, se,
    se_kind, within_2se, mde}}, "mcnemar": {mode: {gained, lost, n_discordant, p_value}},
    "bootstrap": {mode: {difference, ci_low, ci_high, confidence, ...}}}``; the two tests are empty
    when unpaired or without per-prompt decisions.
    """
    bench = registry.get(benchmark)
    metrics = list(metrics or bench.headline_metrics({"metrics": run_metrics}))
    out: dict[str, Any] = {"paired": False, "n_paired": 0, "metrics": {}, "mcnemar": {}, "bootstrap": {}}
    if not bench.prompt_decisions:
        for metric in metrics:
            result = _document_metric(bench, metric, run_metrics, run_samples, ref_metrics, ref_samples)
            out["metrics"][metric] = {k: v for k, v in result.items() if k != "n"}
            out["n_paired"] = max(out["n_paired"], result["n"])
        out["paired"] = out["n_paired"] >= 2
        return out
    run_al, ref_al = ([], [])
    if run_samples is not None and ref_samples is not None:
        run_al, ref_al = paired_samples(run_samples, ref_samples)
    paired = len(run_al) >= 2
    out.update(paired=paired, n_paired=len(run_al))
    for metric in metrics:
        if bench.is_prompt_decision(metric):
            result = metric_delta(metric, run_metrics, run_samples, ref_metrics, ref_samples)
        else:  # a prompt's own value of it (reliable@k, ...), paired by key as documents are
            result = _document_metric(bench, metric, run_metrics, _documents(run_samples), ref_metrics,
                                      _documents(ref_samples))
        out["metrics"][metric] = {k: v for k, v in result.items() if k != "n"}
    if paired:
        for mode in MODES:
            ref_vec = [r.prompt(mode) for r in ref_al]
            run_vec = [r.prompt(mode) for r in run_al]
            test = mcnemar_exact(ref_vec, run_vec)
            out["mcnemar"][mode] = {"gained": test["b01"], "lost": test["b10"],
                                    "n_discordant": test["n_discordant"], "p_value": test["p_value"]}
            out["bootstrap"][mode] = paired_bootstrap([float(x) for x in run_vec], [float(x) for x in ref_vec],
                                                      n_resamples=n_resamples, seed=seed,
                                                      confidence=confidence)
    return out


def per_type_changes(run_samples: Sequence[PromptResult] | None, ref_samples: Sequence[PromptResult] | None,
                     run_types: Mapping[str, Any], ref_types: Mapping[str, Any], mode: str = "strict"
                     ) -> dict[str, dict[str, Any]]:
    """Per instruction type: accuracy in reference and run, delta, paired se, gained and forgotten.

    *Gained* instructions fail in the reference and pass in the run; *forgotten* ones pass in the
    reference and fail in the run (forgetting, when the reference is the base model). The paired se
    clusters a type's instructions by prompt (a prompt can hold the same type twice). Without samples
    only the accuracies from results.json are compared (no se, no counts of gained/forgotten).
    """
    out: dict[str, dict[str, Any]] = {}
    if run_samples is not None and ref_samples is not None:
        run_al, ref_al = paired_samples(run_samples, ref_samples)
        per: dict[str, dict[str, list]] = {}
        for r, b in zip(run_al, ref_al):
            counts: dict[str, list[int]] = {}
            for iid, x, y in zip(r.instruction_ids, r.inst(mode), b.inst(mode)):
                c = counts.setdefault(iid, [0, 0, 0, 0, 0])  # m, run, ref, gained, forgotten
                c[0] += 1
                c[1] += x
                c[2] += y
                c[3] += (not y) and x
                c[4] += y and not x
            for iid, c in counts.items():
                p = per.setdefault(iid, {"m": [], "d": [], "run": [], "ref": [], "gained": [], "forgotten": []})
                p["m"].append(c[0])
                p["d"].append(c[1] - c[2])
                p["run"].append(c[1])
                p["ref"].append(c[2])
                p["gained"].append(c[3])
                p["forgotten"].append(c[4])
        for iid in sorted(per):
            p = per[iid]
            total = sum(p["m"])
            delta = sum(p["d"]) / total
            se = clustered_ratio_stderr(p["d"], p["m"])
            out[iid] = {"count": total, "reference": sum(p["ref"]) / total, "run": sum(p["run"]) / total,
                        "delta": delta, "se": se, "within_2se": within_noise(delta, se),
                        "gained": sum(p["gained"]), "forgotten": sum(p["forgotten"])}
        return out
    key = f"{mode}_acc"
    for iid in sorted(set(run_types) | set(ref_types)):
        a = (run_types.get(iid) or {}).get(key)
        b = (ref_types.get(iid) or {}).get(key)
        count = (ref_types.get(iid) or run_types.get(iid) or {}).get("count")
        delta = a - b if a is not None and b is not None else None
        out[iid] = {"count": count, "reference": b, "run": a, "delta": delta, "se": None,
                    "within_2se": None, "gained": None, "forgotten": None}
    return out
