"""The report as data: rows, deltas with paired tests, seed groups, per-type changes, rankings.

:func:`build_report` returns one JSON-able dict; the Markdown/CSV writers, the plots and the W&B
upload all render from it, so every output shows the same numbers and the combined ``metrics.json``
is exactly what the tables were made from.

Choices, so a reader of the report knows what a number means:

- the columns are the metrics the rows' benchmarks report (:meth:`~ifdistill.evaluator.benchmark.
  Benchmark.headline_metrics`, in first-seen order; IFEval's four for an IFEval report);
- a row's values are at the *final* checkpoint (highest evaluated step); the *best* checkpoint
  (best ``select_metric``, default the benchmark's headline, in its direction) is shown beside it and
  is optimistic (selected on the evaluation prompts);
- deltas compare each row with the *baseline* row (``--baseline``; default: the base model when
  given, else the first row with an evaluation) at the same kind of checkpoint (``checkpoint="final"`` or ``"best"``);
  standard errors and tests are described in :mod:`ifdistill.results.paired`; rows of different
  benchmarks are not compared;
- the per-instruction-type table (benchmarks with per-prompt decisions) compares each row with the *base model* (``--base-model``; without
  one, with the baseline row), so a negative delta there is forgetting of what the base could do;
- teacher-forced accuracy / cross-entropy are taken at the final checkpoint's step (or the latest
  step before it where they were logged).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from ifdistill.evaluator import benchmark as registry
from ifdistill.results import paired, run_config, seed_groups
from ifdistill.results.runs import DEFAULT_TFA_KEYS, DEFAULT_TFCE_KEYS, Checkpoint, Run, find_run

SE_NOTE = ("Standard errors: single values carry the evaluator's standard error (per-prompt decisions: "
           "binomial with n-1 at prompt level, clustered by prompt at instruction level). Deltas carry the "
           "paired standard error of the difference (per-prompt or per-document differences matched by key; "
           "clustered by prompt at instruction level) and fall back to the unpaired sqrt(se_a^2 + se_b^2) "
           "only where a side has no per-document values in samples.jsonl (column 'se'). A delta under 2 of "
           "these standard errors is marked '~' (noise).")


@dataclasses.dataclass
class ReportOptions:
    baseline: str | None = None
    checkpoint: str = "final"  # which checkpoint of each run the deltas compare: "final" or "best"
    select_metric: str | None = None  # None: the headline metric of the first evaluated row's benchmark
    tfa_keys: tuple[str, ...] = DEFAULT_TFA_KEYS
    tfce_keys: tuple[str, ...] = DEFAULT_TFCE_KEYS
    per_type_mode: str = "strict"
    n_resamples: int = 10000
    bootstrap_seed: int = 0
    confidence: float = 0.95
    max_key_columns: int = 6


def _key_columns(runs: Sequence[Run], limit: int) -> list[str]:
    """The key config values each row shows: what metrics.json declares (``config``), then the
    config keys whose values differ between the runs -- except those that only repeat the method
    (``method.name``, class paths in ``_target_``)."""
    declared = sorted({k for r in runs for k in r.key_values})
    differing = [k for k in run_config.differing_keys([r.config for r in runs], limit=limit + 4)
                 if k not in declared]
    repeats_method = [k for k in differing if k.endswith("_target_")
                      or all(run_config.flatten(r.config).get(k) == r.method for r in runs)]
    extra = [k for k in differing if k not in repeats_method]
    return declared + extra[: max(0, limit - len(declared))]


def report_columns(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """``[{metric, label, benchmark, fraction}]``: the metrics the runs' final checkpoints report, in
    first-seen order (the tables' columns)."""
    out: dict[str, dict[str, Any]] = {}
    for r in runs:
        if r.final is not None:
            bench = registry.get(r.final.benchmark)
            for m in r.final.headline_metrics():
                out.setdefault(m, {"metric": m, "label": registry.short_name(m), "benchmark": bench.name,
                                   "fraction": bench.fractions})
    return list(out.values())


def _metric_block(ckpt: Checkpoint | None, metrics: Sequence[str]) -> dict[str, Any]:
    if ckpt is None:
        return {}
    block = {}
    for m in metrics:
        block[m] = ckpt.metrics.get(m)
        block[f"{m}_stderr"] = ckpt.metrics.get(f"{m}_stderr")
    return block


def _pick(run: Run, options: ReportOptions) -> Checkpoint | None:
    return run.best(options.select_metric) if options.checkpoint == "best" else run.final


def _samples(ckpt: Checkpoint | None):
    return ckpt.samples() if ckpt is not None else None


def _row(run: Run, key_columns: Sequence[str], options: ReportOptions, metrics: Sequence[str]) -> dict[str, Any]:
    final, best = run.final, run.best(options.select_metric)
    step = final.step if final else None
    tfa, tfa_step = run.train_at(step, options.tfa_keys) if run.train else (None, None)
    tfce, tfce_step = run.train_at(step, options.tfce_keys) if run.train else (None, None)
    flat = run_config.flatten(run.config)
    evaluated = {c.step for c in run.checkpoints}
    return {
        "name": run.name, "kind": run.kind, "method": run.method, "path": str(run.path),
        "config_hash": run.config_hash, "group_hash": run.group_hash, "seed": run.seed,
        "key_config": {k: run.key_values.get(k, flat.get(k)) for k in key_columns},
        "benchmark": final.benchmark if final else None,
        "final_step": step, "final": _metric_block(final, metrics),
        "best_step": best.step if best else None, "best": _metric_block(best, metrics),
        "tfa": tfa, "tfa_step": tfa_step, "tfce": tfce, "tfce_step": tfce_step,
        "num_prompts": final.metrics.get("num_prompts") if final else None,
        "eval_config_hash": final.eval_config_hash if final else None,
        "n_checkpoints": len(run.checkpoints),
        "missing_steps": sorted({f["step"] for f in run.failures if f.get("step") not in evaluated}),
    }


def _curve(run: Run, options: ReportOptions, metrics: Sequence[str]) -> list[dict[str, Any]]:
    points = []
    for c in run.checkpoints:
        tfa, _ = run.train_at(c.step, options.tfa_keys) if run.train else (None, None)
        tfce, _ = run.train_at(c.step, options.tfce_keys) if run.train else (None, None)
        points.append({"step": c.step, **_metric_block(c, metrics), "tfa": tfa, "tfce": tfce})
    return points


def _discordant(order_by: dict[str, float], truth: dict[str, float], higher_is_better: bool) -> list[list[str]]:
    """Pairs ``[a, b]`` where ``order_by`` ranks a above b but ``truth`` (the evaluation, larger is
    better) ranks b above a."""
    names = sorted(set(order_by) & set(truth))
    sign = 1 if higher_is_better else -1
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            x = sign * (order_by[a] - order_by[b])
            y = truth[a] - truth[b]
            if x * y < 0:
                pairs.append([a, b] if x > 0 else [b, a])
    return pairs


def _rankings(rows: Sequence[dict[str, Any]], metric: str | None, higher_is_better: bool) -> dict[str, Any]:
    """Rank runs by the evaluation's ``metric`` (``by_ifeval``: best first), TFA and TFCE and list the pairs
    the training metrics order wrongly."""
    trained = [r for r in rows if r["kind"] == "run" and r["final"].get(metric) is not None]
    sign = 1.0 if higher_is_better else -1.0
    ifeval = {r["name"]: sign * r["final"][metric] for r in trained}
    tfa = {r["name"]: r["tfa"] for r in trained if r["tfa"] is not None}
    tfce = {r["name"]: r["tfce"] for r in trained if r["tfce"] is not None}
    return {
        "metric": metric,
        "by_ifeval": sorted(ifeval, key=lambda n: -ifeval[n]),
        "by_tfa": sorted(tfa, key=lambda n: -tfa[n]),
        "by_tfce": sorted(tfce, key=lambda n: tfce[n]),
        "tfa_disagrees": _discordant(tfa, ifeval, higher_is_better=True),
        "tfce_disagrees": _discordant(tfce, ifeval, higher_is_better=False),
    }


def build_report(runs: Sequence[Run], base: Run | None = None, options: ReportOptions | None = None,
                 notes: Sequence[str] = ()) -> dict[str, Any]:
    """Everything the outputs show, from loaded runs (``base``: the base model's evaluation;
    ``notes``: what loading left out or found incomplete, shown as warnings)."""
    options = options or ReportOptions()
    everything = ([base] if base is not None else []) + list(runs)
    if not everything:
        raise ValueError("nothing to report: no run or evaluator output found")
    if options.baseline:
        baseline = find_run(everything, options.baseline)
        if baseline.final is None:
            raise ValueError(f"baseline {baseline.name} ({baseline.path}) has no evaluation to compare with")
    else:
        evaluated = [r for r in everything if r.final is not None]
        if not evaluated:
            raise ValueError("nothing to report: no run has an evaluation ("
                             + ", ".join(str(r.path) for r in everything) + ")")
        baseline = evaluated[0]
    key_columns = _key_columns(runs, options.max_key_columns)
    columns = report_columns(everything)
    metrics = [c["metric"] for c in columns]
    select = options.select_metric or baseline.final.headline_metrics()[0]
    if select not in metrics:
        raise ValueError(f"--select-metric {select}: no row reports it (reported: {', '.join(metrics)})")
    options = dataclasses.replace(options, select_metric=select)
    rows = [_row(r, key_columns, options, metrics) for r in everything]

    ref_ckpt = _pick(baseline, options)
    deltas = []
    for r in everything:
        ckpt = _pick(r, options)
        if r is baseline or ckpt is None or ref_ckpt is None or ckpt.benchmark != ref_ckpt.benchmark:
            continue
        result = paired.compare(ckpt.metrics, _samples(ckpt), ref_ckpt.metrics, _samples(ref_ckpt),
                                benchmark=ckpt.benchmark, metrics=ckpt.headline_metrics(),
                                n_resamples=options.n_resamples, seed=options.bootstrap_seed,
                                confidence=options.confidence)
        deltas.append({"run": r.name, "baseline": baseline.name, "step": ckpt.step,
                       "baseline_step": ref_ckpt.step,
                       "eval_config_match": ckpt.eval_config_hash == ref_ckpt.eval_config_hash,
                       **result})

    reference = base if base is not None else baseline
    ref_final = reference.final
    per_type = {}
    for r in everything:
        if r is reference or r.final is None or ref_final is None or r.final.benchmark != ref_final.benchmark \
                or not registry.get(r.final.benchmark).prompt_decisions:
            continue
        per_type[r.name] = paired.per_type_changes(
            _samples(r.final), _samples(ref_final), r.final.per_instruction_type,
            ref_final.per_instruction_type, mode=options.per_type_mode)

    extra = {row["name"]: {"tfa": row["tfa"], "tfce": row["tfce"]} for row in rows}
    return {
        "generated_by": "ifdistill-report",
        "options": dataclasses.asdict(options),
        "standard_error": SE_NOTE,
        "base_model": base.name if base is not None else None,
        "baseline": baseline.name,
        "key_columns": key_columns,
        "columns": columns,
        "runs": rows,
        "curves": {r.name: _curve(r, options, metrics) for r in everything},
        "deltas": deltas,
        "seed_groups": seed_groups.group_by_seed([r for r in runs], metrics, extra),
        "per_instruction_type": {"reference": reference.name, "mode": options.per_type_mode,
                                 "runs": per_type},
        "rankings": _rankings(rows, select, _higher_is_better(everything, select)),
        "failures": {r.name: r.failures for r in everything if r.failures},
        "warnings": list(notes),
    }


def _higher_is_better(runs: Sequence[Run], metric: str) -> bool:
    """The direction of ``metric``: its benchmark's (the first run that reports it)."""
    return next((registry.get(r.final.benchmark).higher_is_better for r in runs
                 if r.final is not None and metric in r.final.metrics), True)


def json_safe(value: Any) -> Any:
    """NaN/inf -> None recursively (JSON has no NaN; the combined metrics.json must parse anywhere)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
