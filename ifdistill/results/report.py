"""The report as data: rows, deltas with paired tests, seed groups, per-type changes, rankings.

:func:`build_report` returns one JSON-able dict; the Markdown/CSV writers, the plots and the W&B
upload all render from it, so every output shows the same numbers and the combined ``metrics.json``
is exactly what the tables were made from.

Choices, so a reader of the report knows what a number means:

- the columns are the metrics the rows' benchmarks report (:meth:`~ifdistill.benchmarks.registry.
  Benchmark.headline_metrics`, in first-seen order; IFEval's four for an IFEval report);
- a row's values are at the *final* checkpoint (highest evaluated step); the *best* checkpoint
  (best ``select_metric``, default the benchmark's headline, in its direction) is shown beside it and
  is optimistic (selected on the evaluation prompts);
- deltas compare each row with the *baseline* row (``--baseline``; default: the base model when
  given, else the first row with an evaluation) at the same kind of checkpoint (``checkpoint="final"`` or ``"best"``);
  standard errors and tests are described in :mod:`ifdistill.results.paired`; rows of different
  benchmarks are never compared: each benchmark has its own columns (:func:`report_columns`) and its own
  baseline (the one asked for where it is of that benchmark, else that benchmark's base model, else its
  first evaluated row);
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

from ifdistill.benchmarks import registry
from ifdistill.benchmarks.base import short_name
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


def group_labels(runs: Sequence[Run], key_columns: Sequence[str] | None = None) -> dict[str, str]:
    """A name per seed group: its method and the key config values that tell the runs apart
    (``key_columns``; default the report's, :func:`_key_columns`), e.g. ``sft ratio=0.18`` -- those every run
    has (one method's own settings, absent from the others', are the method's name already)."""
    from ifdistill.results.tables import value

    keys = _key_columns(runs, ReportOptions.max_key_columns) if key_columns is None else key_columns
    values = {id(r): {k: r.key_values.get(k, run_config.flatten(r.config).get(k)) for k in keys} for r in runs}
    shared = [k for k in keys if all(values[id(r)][k] is not None for r in runs)]
    return {r.group_hash: " ".join([r.method or r.kind] + [f"{k}={value(values[id(r)][k])}" for k in shared])
            for r in runs}


def report_columns(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """``[{metric, name, label, benchmark, fraction}]``: the metrics the runs' final checkpoints report, in
    first-seen order (the tables' columns). ``name``: the metric as its benchmark names it; ``metric``: the
    column's key in the rows -- the name itself when the rows hold one benchmark, ``<benchmark>:<name>``
    when they hold several (IFEval's and IFBench's metrics share names), so a row fills only the columns of
    its own benchmark."""
    found = dict.fromkeys((r.final.benchmark, m) for r in runs if r.final is not None
                          for m in r.final.headline_metrics())
    several = len({b for b, _ in found}) > 1
    out = []
    for b, m in found:
        bench = registry.get(b)
        out.append({"metric": f"{b}:{m}" if several else m, "name": m, "benchmark": b, "fraction": bench.is_fraction(m),
                    "label": f"{bench.display} {short_name(m)}" if several else short_name(m)})
    return out


def _metric_block(ckpt: Checkpoint | None, columns: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The values of the ``columns`` of ``ckpt``'s benchmark (by column key), with their standard errors."""
    if ckpt is None:
        return {}
    block = {}
    for c in columns:
        if c["benchmark"] == ckpt.benchmark:
            block[c["metric"]] = ckpt.metrics.get(c["name"])
            block[f"{c['metric']}_stderr"] = ckpt.metrics.get(f"{c['name']}_stderr")
    return block


def _select(run: Run, options: ReportOptions, benchmark: str | None) -> str | None:
    """The selection metric for ``run``: ``options.select_metric`` for a run of ``benchmark`` (the one it was
    chosen for), else the run's own headline."""
    return options.select_metric if run.final is not None and run.final.benchmark == benchmark else None


def _pick(run: Run, options: ReportOptions, benchmark: str | None = None) -> Checkpoint | None:
    return run.best(_select(run, options, benchmark)) if options.checkpoint == "best" else run.final


def _samples(ckpt: Checkpoint | None):
    return ckpt.samples() if ckpt is not None else None


def _row(run: Run, key_columns: Sequence[str], options: ReportOptions, metrics: Sequence[dict[str, Any]],
         benchmark: str | None) -> dict[str, Any]:
    final, best = run.final, run.best(_select(run, options, benchmark))
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


def _curve(run: Run, options: ReportOptions, metrics: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
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


def build_report(runs: Sequence[Run], base: Run | Sequence[Run] | None = None, options: ReportOptions | None = None,
                 notes: Sequence[str] = ()) -> dict[str, Any]:
    """Everything the outputs show, from loaded runs (``base``: the base model's evaluation, or one per
    benchmark;
    ``notes``: what loading left out or found incomplete, shown as warnings)."""
    options = options or ReportOptions()
    bases = [] if base is None else [base] if isinstance(base, Run) else list(base)
    everything = bases + list(runs)
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
        # the base model of the first run's benchmark, else the first evaluated row
        first = next((r.final.benchmark for r in runs if r.final is not None), None)
        baseline = next((b for b in bases if b.final is not None and b.final.benchmark == first), evaluated[0])
    key_columns = _key_columns(runs, options.max_key_columns)
    columns = report_columns(everything)
    main = baseline.final.benchmark
    key = {(c["benchmark"], c["name"]): c["metric"] for c in columns}
    select = options.select_metric or baseline.final.headline_metrics()[0]
    if (main, select) not in key:
        raise ValueError(f"--select-metric {select}: no row of {main} reports it "
                         f"(reported: {', '.join(n for b, n in key if b == main)})")
    options = dataclasses.replace(options, select_metric=select)
    rows = [_row(r, key_columns, options, columns, main) for r in everything]

    # Each benchmark is compared with a baseline of its own: the one asked for (or the base model) where it
    # is of that benchmark, else that benchmark's base model, else its first evaluated row.
    own = {b: next((r for r in [baseline, *bases, *everything] if r.final is not None and r.final.benchmark == b))
           for b in dict.fromkeys(c["benchmark"] for c in columns)}
    deltas = []
    for r in everything:
        ckpt = _pick(r, options, main)
        ref = own.get(ckpt.benchmark) if ckpt is not None else None
        ref_ckpt = _pick(ref, options, main) if ref is not None else None
        if ref is None or r is ref or ref_ckpt is None:
            continue
        result = paired.compare(ckpt.metrics, _samples(ckpt), ref_ckpt.metrics, _samples(ref_ckpt),
                                benchmark=ckpt.benchmark, metrics=ckpt.headline_metrics(),
                                n_resamples=options.n_resamples, seed=options.bootstrap_seed,
                                confidence=options.confidence)
        result["metrics"] = {key.get((ckpt.benchmark, m), m): v for m, v in result["metrics"].items()}
        deltas.append({"run": r.name, "baseline": ref.name, "step": ckpt.step,
                       "baseline_step": ref_ckpt.step,
                       "eval_config_match": ckpt.eval_config_hash == ref_ckpt.eval_config_hash,
                       **result})

    # per-type changes against the base model of the row's benchmark (without one, its baseline)
    references = {b: next((x for x in bases if x.final is not None and x.final.benchmark == b), r)
                  for b, r in own.items()}
    reference = references[main]
    base = next((b for b in bases if b is reference), bases[0] if bases else None)
    per_type = {}
    for r in everything:
        ref_final = references[r.final.benchmark].final if r.final is not None else None
        if any(r is x for x in references.values()) or ref_final is None or not registry.get(r.final.benchmark).prompt_decisions:
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
        "baselines": {b: r.name for b, r in own.items()},
        "select_key": key[(main, select)],
        "curves": {r.name: _curve(r, options, columns) for r in everything},
        "deltas": deltas,
        "seed_groups": seed_groups.group_by_seed([r for r in runs], {c["metric"]: (c["benchmark"], c["name"])
                                                                     for c in columns}, extra),
        "per_instruction_type": {"reference": reference.name, "mode": options.per_type_mode,
                                 "runs": per_type},
        "rankings": _rankings(rows, key[(main, select)], registry.get(main).higher_is_better),
        "failures": {r.name: r.failures for r in everything if r.failures},
        "warnings": list(notes),
    }


def json_safe(value: Any) -> Any:
    """NaN/inf -> None recursively (JSON has no NaN; the combined metrics.json must parse anywhere)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
