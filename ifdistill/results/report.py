"""The report as data: rows, deltas with paired tests, seed groups, per-type changes, rankings.

:func:`build_report` returns one JSON-able dict; the Markdown/CSV writers, the plots and the W&B
upload all render from it, so every output shows the same numbers and the combined ``metrics.json``
is exactly what the tables were made from.

Choices, so a reader of the report knows what a number means:

- a row's IFEval values are at the *final* checkpoint (highest evaluated step); the *best*
  checkpoint (highest ``select_metric``) is shown beside it and is optimistic (selected on the
  evaluation prompts);
- deltas compare each row with the *baseline* row (``--baseline``; default: the base model when
  given, else the first row with an evaluation) at the same kind of checkpoint (``checkpoint="final"`` or ``"best"``);
  standard errors and tests are described in :mod:`ifdistill.results.paired`;
- the per-instruction-type table compares each row with the *base model* (``--base-model``; without
  one, with the baseline row), so a negative delta there is forgetting of what the base could do;
- teacher-forced accuracy / cross-entropy are taken at the final checkpoint's step (or the latest
  step before it where they were logged).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from ifdistill.ifeval.stats import METRICS
from ifdistill.results import paired, run_config, seed_groups
from ifdistill.results.runs import DEFAULT_TFA_KEYS, DEFAULT_TFCE_KEYS, Checkpoint, Run, find_run

SE_NOTE = ("Standard errors: single values carry the evaluator's standard error (prompt level: binomial "
           "with n-1; instruction level: clustered by prompt). Deltas carry the paired standard error "
           "of the difference (per-prompt differences, prompts matched by key; clustered by prompt at "
           "instruction level) and fall back to the unpaired sqrt(se_a^2 + se_b^2) only where a side "
           "has no samples.jsonl (column 'se'). A delta under 2 of these standard errors is marked "
           "'~' (noise).")


@dataclasses.dataclass
class ReportOptions:
    baseline: str | None = None
    checkpoint: str = "final"  # which checkpoint of each run the deltas compare: "final" or "best"
    select_metric: str = "prompt_level_strict_acc"
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


def _metric_block(ckpt: Checkpoint | None) -> dict[str, Any]:
    if ckpt is None:
        return {}
    block = {}
    for m in METRICS:
        block[m] = ckpt.metrics.get(m)
        block[f"{m}_stderr"] = ckpt.metrics.get(f"{m}_stderr")
    return block


def _pick(run: Run, options: ReportOptions) -> Checkpoint | None:
    return run.best(options.select_metric) if options.checkpoint == "best" else run.final


def _samples(ckpt: Checkpoint | None):
    return ckpt.output.samples if ckpt is not None and ckpt.output is not None else None


def _row(run: Run, key_columns: Sequence[str], options: ReportOptions) -> dict[str, Any]:
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
        "final_step": step, "final": _metric_block(final),
        "best_step": best.step if best else None, "best": _metric_block(best),
        "tfa": tfa, "tfa_step": tfa_step, "tfce": tfce, "tfce_step": tfce_step,
        "num_prompts": final.metrics.get("num_prompts") if final else None,
        "eval_config_hash": final.eval_config_hash if final else None,
        "n_checkpoints": len(run.checkpoints),
        "missing_steps": sorted({f["step"] for f in run.failures if f.get("step") not in evaluated}),
    }


def _curve(run: Run, options: ReportOptions) -> list[dict[str, Any]]:
    points = []
    for c in run.checkpoints:
        tfa, _ = run.train_at(c.step, options.tfa_keys) if run.train else (None, None)
        tfce, _ = run.train_at(c.step, options.tfce_keys) if run.train else (None, None)
        points.append({"step": c.step, **_metric_block(c), "tfa": tfa, "tfce": tfce})
    return points


def _discordant(order_by: dict[str, float], truth: dict[str, float], higher_is_better: bool) -> list[list[str]]:
    """Pairs ``[a, b]`` where ``order_by`` ranks a above b but ``truth`` (IFEval) ranks b above a."""
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


def _rankings(rows: Sequence[dict[str, Any]], metric: str) -> dict[str, Any]:
    """Rank runs by IFEval, TFA and TFCE and list the pairs the training metrics order wrongly."""
    trained = [r for r in rows if r["kind"] == "run" and r["final"].get(metric) is not None]
    ifeval = {r["name"]: r["final"][metric] for r in trained}
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
    rows = [_row(r, key_columns, options) for r in everything]

    ref_ckpt = _pick(baseline, options)
    deltas = []
    for r in everything:
        ckpt = _pick(r, options)
        if r is baseline or ckpt is None or ref_ckpt is None:
            continue
        result = paired.compare(ckpt.metrics, _samples(ckpt), ref_ckpt.metrics, _samples(ref_ckpt),
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
        if r is reference or r.final is None or ref_final is None:
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
        "runs": rows,
        "curves": {r.name: _curve(r, options) for r in everything},
        "deltas": deltas,
        "seed_groups": seed_groups.group_by_seed([r for r in runs], extra),
        "per_instruction_type": {"reference": reference.name, "mode": options.per_type_mode,
                                 "runs": per_type},
        "rankings": _rankings(rows, options.select_metric),
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
