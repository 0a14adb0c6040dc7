"""Send one checkpoint evaluation to every logger, at the checkpoint's step.

W&B drops data logged with ``step=`` below its current step, and an evaluation usually finishes after
training moved on. So W&B gets its own step key: ``ifeval/step`` declared with
``define_metric('ifeval/*', step_metric='ifeval/step')``; the row carries the checkpoint's step as a value.
Other loggers (CSV, TensorBoard) accept past steps and get ``log_metrics(..., step=step)``.

The namespace is the evaluation's benchmark (``eval.benchmark`` in results.json's config, ``ifeval``
when absent): an IFBench evaluation logs ``ifbench/*`` and ``ifbench_type/*`` on ``ifbench/step``,
so the two benchmarks of one run never share keys or a step axis. lm-eval tasks log
``lmeval/<task>/<metric>[/<filter>]`` on ``lmeval/step``, the judge ``judge/win_rate`` (or
``judge/score_mean``) and its counts on ``judge/step``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Iterable

from ifdistill.evaluator.output import METRICS, OWN_METRICS, SAMPLES_FILE, benchmark_of, iter_sample_rows, metric_values

STEP_KEY = "ifeval/step"  # IFEval's; other benchmarks: step_key(benchmark)


def step_key(benchmark: str) -> str:
    return f"{benchmark}/step"


def evaluation_line(step: int, results: dict, label: str = "checkpoint-eval") -> str:
    """One line for a finished checkpoint evaluation: the aggregates (IFEval's four, or every lm-eval
    task metric), each ``value±stderr``."""
    agg = metric_values(results)
    parts = []
    names = METRICS if benchmark_of(results) not in OWN_METRICS else [k for k in agg if not k.endswith("_stderr")]
    for name in names:
        if name in agg:
            se = agg.get(f"{name}_stderr")
            short = name.removesuffix("_acc").replace("_level_", " ").replace("_", " ")
            parts.append(f"{short} {agg[name]:.4f}" + (f"±{se:.4f}" if se is not None else ""))
    return f"[{label}] step {step}: " + (" | ".join(parts) or "no aggregate metrics in results.json")


def flat_metrics(results: dict) -> dict[str, float]:
    """``<benchmark>/<aggregate>`` plus ``<benchmark>_type/<instruction id>/{strict,loose}`` accuracies."""
    bench = benchmark_of(results)
    flat = {f"{bench}/{k}": v for k, v in metric_values(results).items()}
    for inst, vals in (results.get("per_instruction_type") or {}).items():
        for k, v in vals.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                flat[f"{bench}_type/{inst}/{k}"] = float(v)
    return flat


SAMPLE_COLUMNS = {"default": ["key", "prompt", "response", "strict_prompt", "loose_prompt"],
                  "judge": ["key", "prompt", "response", "verdicts", "outcome_or_score"]}


def _judged(s: dict) -> list[Any]:
    verdicts = "; ".join(f"{j['order']}: {j['verdict']['category']} {j['verdict']['value']}" for j in s["judgements"])
    return [verdicts, str(s.get("outcome", s.get("score")))]


def sample_rows(out_dir: Path, limit: int, bench: str = "ifeval") -> list[list[Any]]:
    """The first ``limit`` samples as rows of the W&B samples table (none if the evaluation kept no samples);
    a judge's rows show each judgement's parsed verdict and the pair's outcome (or the score)."""
    if limit <= 0 or not (Path(out_dir) / SAMPLES_FILE).is_file():
        return []
    return [[str(s.get("key")), s.get("prompt", ""), s.get("response", "")] +
            (_judged(s) if bench == "judge" else [bool(s.get("strict_prompt")), bool(s.get("loose_prompt"))])
            for s in itertools.islice(iter_sample_rows(out_dir), limit)]


_DEFINED: set[tuple[str, str]] = set()  # (W&B run id, benchmark) whose metrics are declared


def log_evaluation(loggers: Iterable[Any], step: int, results: dict, out_dir: Path, n_samples: int = 64) -> dict:
    metrics = flat_metrics(results)
    bench = benchmark_of(results)
    for logger in loggers:
        if type(logger).__name__ == "WandbLogger":
            _log_wandb(logger.experiment, step, metrics, out_dir, n_samples, bench)
        else:
            logger.log_metrics({**metrics, step_key(bench): float(step)}, step=step)
            logger.save()
    return metrics


def _log_wandb(run: Any, step: int, metrics: dict, out_dir: Path, n_samples: int, bench: str = "ifeval") -> None:
    import wandb

    key = step_key(bench)
    if (run.id, bench) not in _DEFINED:
        run.define_metric(key)
        run.define_metric(f"{bench}/*", step_metric=key)
        run.define_metric(f"{bench}_type/*", step_metric=key)
        _DEFINED.add((run.id, bench))
    payload: dict[str, Any] = {**metrics, key: step}
    rows = sample_rows(out_dir, n_samples, bench)
    if rows:
        payload[f"{bench}/samples"] = wandb.Table(columns=SAMPLE_COLUMNS.get(bench, SAMPLE_COLUMNS["default"]),
                                                  data=rows)
    run.log(payload)
    # The summary shows the latest checkpoint's evaluation, whatever order evaluations finish in.
    if step >= (run.summary.get(key) or -1):
        for k, v in metrics.items():
            if k.startswith(f"{bench}/"):
                run.summary[k] = v
        run.summary[key] = step
