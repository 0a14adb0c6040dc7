"""Format vs task over training: does a run learn the *form* of the answers before the answers?

Why: a model fine-tuned on a task often first learns its output format and only later the task
("biphasic" learning); a metric that needs the format (IFEval strict, GSM8K's strict-match) then
rises for reasons that are not the task, and one that ignores it misses the first phase. Per
evaluation (from its samples.jsonl) and per step of each run:

- **instruction benchmarks** (a registration with ``format_prefixes``: IFEval, IFBench): prompt-level
  strict and loose accuracy and their gap ``loose - strict`` (paired per prompt: se of the mean
  per-prompt difference), and instruction-level strict accuracy over the *format* instructions (ids
  whose prefix the benchmark lists in ``format_prefixes``) and over the *content* ones (the others),
  each with its standard error clustered by prompt (:func:`ifdistill.statistics.clustered_ratio_stderr`);
  format curve = format accuracy, task curve = content accuracy;
- **generative lm-eval tasks** with a strict and a lenient filter (a registration with ``unparsed``: the
  strict filter is the one whose name holds ``strict_filter_marker``): the strict filter's *parse rate*
  (documents where it extracted an answer, i.e. kept anything but ``unparsed``) next to the accuracy
  under each filter; format curve = parse rate, task curve = accuracy under the lenient filter.

The base model's evaluation of the same benchmark (and task) is step 0 of every curve.

**The note** ("format before task"), per run and curve pair, with ``k`` the page's noise threshold
(default 2): the format curve *saturates* at the first step where it reaches 90 % of its rise from step 0
to its maximum, provided that rise exceeds ``k`` standard errors (of the maximum); the task curve *rises*
at the first step where it exceeds its step-0 value by more than ``k`` standard errors (of that step).
The page notes a run whose format curve saturates at a step before the task curve rises, or saturates
while the task curve never rises.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ifdistill.benchmarks import registry
from ifdistill.evaluator import output as eval_output
from ifdistill.results.page import PageRow
from ifdistill.statistics import clustered_ratio_stderr

SATURATION = 0.9  # share of the format curve's rise that counts as saturated


def _mean_se(values: Sequence[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return sum(values) / len(values), clustered_ratio_stderr(list(values), [1] * len(values))


def instruction_numbers(results_dir: str | Path, format_prefixes: Sequence[str]) -> dict[str, Any] | None:
    """Strict/loose gap and format/content accuracy of one instruction evaluation (module docstring)."""
    if not (Path(results_dir) / eval_output.SAMPLES_FILE).is_file():
        return None
    prompts = eval_output.read_samples(results_dir)
    gap, gap_se = _mean_se([float(p.loose_prompt) - float(p.strict_prompt) for p in prompts])
    out: dict[str, Any] = {"strict": _mean_se([float(p.strict_prompt) for p in prompts])[0],
                           "loose": _mean_se([float(p.loose_prompt) for p in prompts])[0],
                           "gap": gap, "gap_se": gap_se, "n": len(prompts)}
    for category in ("format", "content"):
        followed, totals = [], []
        for p in prompts:
            kept = [x for iid, x in zip(p.instruction_ids, p.strict_inst)
                    if (iid.split(":", 1)[0] in format_prefixes) == (category == "format")]
            if kept:  # a prompt without such instructions is no cluster of this category
                followed.append(sum(kept))
                totals.append(len(kept))
        total = sum(totals)
        out[category] = sum(followed) / total if total else None
        out[f"{category}_se"] = clustered_ratio_stderr(followed, totals) if total else None
        out[f"{category}_n"] = total
    return out


def parse_numbers(results_dir: str | Path, unparsed: str, marker: str) -> dict[str, dict[str, Any]]:
    """Per generative task with a strict and a lenient filter: parse rate and accuracy (module docstring)."""
    if not (Path(results_dir) / eval_output.SAMPLES_FILE).is_file():
        return {}
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in eval_output.iter_sample_rows(results_dir):
        if isinstance(row.get("filtered"), dict) and len(row["filtered"]) >= 2:
            by_task.setdefault(str(row["task"]), []).append(row)
    out = {}
    for task, rows in sorted(by_task.items()):
        filters = sorted(rows[0]["filtered"])
        strict = next((f for f in filters if marker in f), None)
        lenient = next((f for f in filters if f != strict), None)
        metric = next((m.rsplit("/", 1)[0] for m in sorted(rows[0]["metrics"]) if m.endswith(f"/{strict}")), None)
        if strict is None or lenient is None or metric is None:
            continue
        parsed, parsed_se = _mean_se([float(r["filtered"][strict] != unparsed) for r in rows])
        acc_s, acc_s_se = _mean_se([float(r["metrics"][f"{metric}/{strict}"]) for r in rows])
        acc_l, acc_l_se = _mean_se([float(r["metrics"][f"{metric}/{lenient}"]) for r in rows])
        out[task] = {"metric": metric, "strict_filter": strict, "lenient_filter": lenient, "n": len(rows),
                     "parse_rate": parsed, "parse_rate_se": parsed_se, "acc_strict": acc_s, "acc_strict_se": acc_s_se,
                     "acc_lenient": acc_l, "acc_lenient_se": acc_l_se}
    return out


def _series(row: PageRow) -> dict[str, dict[int, dict[str, Any]]]:
    """``{series: {step: numbers with format/task values}}`` of one row (a base row's step is 0)."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for evals in row.evaluations.values():
        for e in evals:
            if e.results_dir is None:
                continue
            bench = registry.get(e.benchmark)
            step = 0 if e.step is None else e.step
            prefixes = getattr(bench, "format_prefixes", None)
            if prefixes is not None:
                numbers = instruction_numbers(e.results_dir, prefixes)
                if numbers is not None:
                    numbers.update(format_value=numbers["format"], format_value_se=numbers["format_se"],
                                   task_value=numbers["content"], task_value_se=numbers["content_se"])
                    out.setdefault(f"{bench.display}: format vs content instructions", {})[step] = numbers
            unparsed = getattr(bench, "unparsed", None)
            if unparsed is not None:
                for task, numbers in parse_numbers(e.results_dir, unparsed, bench.strict_filter_marker).items():
                    numbers.update(format_value=numbers["parse_rate"], format_value_se=numbers["parse_rate_se"],
                                   task_value=numbers["acc_lenient"], task_value_se=numbers["acc_lenient_se"])
                    out.setdefault(f"{task}: {numbers['strict_filter']} parse rate vs accuracy", {})[step] = numbers
    return out


def format_before_task(points: Sequence[dict[str, Any]], k: float) -> dict[str, Any]:
    """``{saturates_at, rises_at, note}`` of one curve pair, steps ascending from 0 (module docstring)."""
    pts = [p for p in points if p.get("format_value") is not None and p.get("task_value") is not None]
    if len(pts) < 2:
        return {"saturates_at": None, "rises_at": None, "note": False}
    f0, t0 = pts[0]["format_value"], pts[0]["task_value"]
    top = max(pts, key=lambda p: p["format_value"])
    rise = top["format_value"] - f0
    saturates = None
    if rise > k * (top.get("format_value_se") or 0.0) and rise > 0:
        saturates = next(p["step"] for p in pts if p["format_value"] >= f0 + SATURATION * rise)
    rises = next((p["step"] for p in pts[1:] if p["task_value"] - t0 > k * (p.get("task_value_se") or 0.0)), None)
    return {"saturates_at": saturates, "rises_at": rises,
            "note": saturates is not None and (rises is None or saturates < rises)}


def format_task(page: dict, rows: Sequence[PageRow]) -> dict[str, Any]:
    """``{"runs": {run: {series: {"points": [...], saturates_at, rises_at, note}}}, "notes": [...]}``."""
    k = page["options"]["noise_se"]
    base = next((r for r in rows if r.kind == "base"), None)
    base_series = _series(base) if base is not None else {}
    out: dict[str, Any] = {"runs": {}, "notes": []}
    for row in rows:
        if row.kind != "run":
            continue
        for name, by_step in _series(row).items():
            steps = {**({0: base_series[name][0]} if name in base_series and 0 in base_series[name] else {}), **by_step}
            points = [{"step": s, **steps[s]} for s in sorted(steps)]
            reading = format_before_task(points, k)
            out["runs"].setdefault(row.name, {})[name] = {"points": points, **reading}
            if reading["note"]:
                rises = f"rises at step {reading['rises_at']}" if reading["rises_at"] is not None else \
                    "has not risen by the last step"
                out["notes"].append(f"{row.name}, {name}: the format curve saturates at step "
                                    f"{reading['saturates_at']}; the task curve {rises} (format before task)")
    return out
