"""Send one checkpoint evaluation to every logger, at the checkpoint's step.

W&B drops data logged with ``step=`` below its current step, and an evaluation usually finishes after
training moved on. So W&B gets its own step key per benchmark: ``<benchmark>/step`` declared with
``define_metric('<benchmark>/*', step_metric='<benchmark>/step')``; the row carries the checkpoint's step as a value.
Other loggers (CSV, TensorBoard) accept past steps and get ``log_metrics(..., step=step)``.

The namespace is the evaluation's benchmark (``eval.benchmark`` in results.json's config, the default
one when absent): each benchmark logs ``<benchmark>/*`` (and its per-type breakdown ``<benchmark>_type/*``)
on ``<benchmark>/step``, so the benchmarks of one run never share keys or a step axis. Which metrics,
which breakdown and which samples-table columns is the benchmark's own (:mod:`ifdistill.evaluator.benchmark`).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Iterable

from ifdistill.evaluator.benchmark import benchmark_of, of_results, short_name
from ifdistill.evaluator.output import SAMPLES_FILE, iter_sample_rows

__all__ = ["benchmark_of", "evaluation_line", "flat_metrics", "log_evaluation", "sample_table", "step_key"]


def step_key(benchmark: str) -> str:
    return f"{benchmark}/step"


def evaluation_line(step: int, results: dict, label: str = "checkpoint-eval") -> str:
    """One line for a finished checkpoint evaluation: the benchmark's headline metrics, each ``value±stderr``."""
    bench = of_results(results)
    agg = bench.metric_values(results)
    parts = []
    for name in bench.headline_metrics(results):
        if name in agg:
            se = agg.get(f"{name}_stderr")
            parts.append(f"{short_name(name)} {agg[name]:.4f}" + (f"±{se:.4f}" if se is not None else ""))
    return f"[{label}] step {step}: " + (" | ".join(parts) or "no aggregate metrics in results.json")


def flat_metrics(results: dict) -> dict[str, float]:
    """``<benchmark>/<aggregate>`` plus the benchmark's per-type breakdown as ``<benchmark>_type/<type>/<value>``."""
    bench = of_results(results)
    flat = {f"{bench.name}/{k}": v for k, v in bench.metric_values(results).items()}
    for kind, values in bench.per_type(results).items():
        flat.update({f"{bench.name}_type/{kind}/{k}": v for k, v in values.items()})
    return flat


def sample_table(out_dir: Path, limit: int, results: dict) -> tuple[list[str], list[list[Any]]]:
    """The W&B samples table of the first ``limit`` samples, with the columns of the results' benchmark
    (:meth:`~ifdistill.evaluator.benchmark.Benchmark.sample_table`); no rows if the evaluation kept none."""
    bench = of_results(results)
    if limit <= 0 or not (Path(out_dir) / SAMPLES_FILE).is_file():
        return bench.sample_table([])
    return bench.sample_table(list(itertools.islice(iter_sample_rows(out_dir), limit)))


_DEFINED: set[tuple[str, str]] = set()  # (W&B run id, benchmark) whose metrics are declared


def log_evaluation(loggers: Iterable[Any], step: int, results: dict, out_dir: Path, n_samples: int = 64) -> dict:
    metrics = flat_metrics(results)
    bench = benchmark_of(results)
    for logger in loggers:
        if type(logger).__name__ == "WandbLogger":
            _log_wandb(logger.experiment, step, metrics, sample_table(out_dir, n_samples, results), bench)
        else:
            logger.log_metrics({**metrics, step_key(bench): float(step)}, step=step)
            logger.save()
    return metrics


def _log_wandb(run: Any, step: int, metrics: dict, table: tuple[list[str], list[list[Any]]], bench: str) -> None:
    import wandb

    key = step_key(bench)
    if (run.id, bench) not in _DEFINED:
        run.define_metric(key)
        run.define_metric(f"{bench}/*", step_metric=key)
        run.define_metric(f"{bench}_type/*", step_metric=key)
        _DEFINED.add((run.id, bench))
    payload: dict[str, Any] = {**metrics, key: step}
    columns, rows = table
    if rows:
        payload[f"{bench}/samples"] = wandb.Table(columns=columns, data=rows)
    run.log(payload)
    # The summary shows the latest checkpoint's evaluation, whatever order evaluations finish in.
    if step >= (run.summary.get(key) or -1):
        for k, v in metrics.items():
            if k.startswith(f"{bench}/"):
                run.summary[k] = v
        run.summary[key] = step
