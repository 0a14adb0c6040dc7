"""Send one checkpoint evaluation to every logger, at the checkpoint's step.

W&B drops data logged with ``step=`` below its current step, and an evaluation usually finishes after
training moved on. So W&B gets its own step key per eval section: ``<namespace>/step`` declared with
``define_metric('<namespace>/*', step_metric='<namespace>/step')``; the row carries the checkpoint's step as
a value. Other loggers (CSV, TensorBoard) accept past steps and get ``log_metrics(..., step=step)``.

The namespace is the eval section's (:func:`ifdistill.benchmarks.registry.namespace`): the run's ``eval``
section logs under its benchmark's name (``ifeval/*``), an extra section ``evals.<name>`` under
``<name>/*``; each logs ``<namespace>/*`` (and its per-type breakdown ``<namespace>_type/*``) on
``<namespace>/step``, so the sections of one run -- two lm-eval sections too -- never share keys or a step
axis. Which metrics, which breakdown and which samples-table columns is the benchmark's own
(:mod:`ifdistill.benchmarks.registry`).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from ifdistill.benchmarks.base import short_name
from ifdistill.benchmarks.registry import benchmark_of, namespace, of_results
from ifdistill.evaluator.output import SAMPLES_FILE, iter_sample_rows

__all__ = ["LoggingError", "benchmark_of", "evaluation_line", "flat_metrics", "log_evaluation", "one_type_per_column",
           "sample_table", "step_key"]


def step_key(ns: str) -> str:
    """The W&B step key of a namespace (:func:`~ifdistill.benchmarks.registry.namespace`)."""
    return f"{ns}/step"


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


def flat_metrics(results: dict, ns: str | None = None) -> dict[str, float]:
    """``<ns>/<aggregate>`` plus the benchmark's per-type breakdown as ``<ns>_type/<type>/<value>`` (``ns``:
    the section's namespace, default the benchmark's name)."""
    bench = of_results(results)
    ns = ns or bench.name
    flat = {f"{ns}/{k}": v for k, v in bench.metric_values(results).items()}
    for kind, values in bench.per_type(results).items():
        flat.update({f"{ns}_type/{kind}/{k}": v for k, v in values.items()})
    return flat


def sample_table(out_dir: Path, limit: int, results: dict) -> tuple[list[str], list[list[Any]]]:
    """The W&B samples table of the first ``limit`` samples, with the columns of the results' benchmark
    (:meth:`~ifdistill.benchmarks.base.Benchmark.sample_table`), each column of one type
    (:func:`one_type_per_column`); no rows if the evaluation kept none."""
    bench = of_results(results)
    if limit <= 0 or not (Path(out_dir) / SAMPLES_FILE).is_file():
        return bench.sample_table([])
    columns, rows = bench.sample_table(list(itertools.islice(iter_sample_rows(out_dir), limit)))
    return columns, one_type_per_column(rows)


def one_type_per_column(rows: list[list[Any]]) -> list[list[Any]]:
    """``rows`` with every column whose values differ in type rendered as text in every row (W&B refuses a
    table whose column mixes types: lm-eval's ``target`` is a choice's index for a multiple-choice task and
    the answer's text for a generative one, and one section may hold both); a missing value (None) fits any
    column and becomes an empty text in a rendered one. Columns of one type keep their values."""
    if not rows:
        return rows
    mixed = [len({type(v) for v in column if v is not None}) > 1 for column in zip(*rows)]
    if not any(mixed):
        return rows
    return [[("" if v is None else v if isinstance(v, str) else str(v)) if m else v for v, m in zip(row, mixed)]
            for row in rows]


class LoggingError(RuntimeError):
    """Some part of an evaluation did not reach a logger (one line, naming it); every other part did."""


_DEFINED: set[tuple[str, str]] = set()  # (W&B run id, namespace) whose metrics are declared


def log_evaluation(loggers: Iterable[Any], step: int, results: dict, out_dir: Path, n_samples: int = 64,
                   section: str | None = None) -> dict:
    """Log one evaluation of eval section ``section`` (None: the run's ``eval``) at ``step``; returns the
    flat metrics logged.

    The scalars reach every logger whatever happens to the W&B samples table: W&B gets the table in the
    scalars' row, and a table that cannot be built or logged leaves that row without it. A table or a
    logger that fails raises :class:`LoggingError` (one line) once every other logger and part is logged."""
    ns = namespace(section, benchmark_of(results))
    metrics = flat_metrics(results, ns)
    failures: list[str] = []
    for logger in loggers:
        try:
            if type(logger).__name__ == "WandbLogger":
                table_error = _log_wandb(logger.experiment, step, metrics, ns,
                                         lambda: sample_table(out_dir, n_samples, results))
                if table_error is not None:
                    failures.append(f"W&B samples table {ns}/samples (the metrics were logged): {_one_line(table_error)}")
            else:
                logger.log_metrics({**metrics, step_key(ns): float(step)}, step=step)
                logger.save()
        except Exception as err:  # noqa: BLE001 -- reported by LoggingError, the others still log
            failures.append(f"{type(logger).__name__}: {_one_line(err)}")
    if failures:
        raise LoggingError("; ".join(failures))
    return metrics


def _one_line(err: BaseException, limit: int = 300) -> str:
    text = " ".join(f"{type(err).__name__}: {err}".split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _log_wandb(run: Any, step: int, metrics: dict, ns: str,
               table: Callable[[], tuple[list[str], list[list[Any]]]]) -> Optional[Exception]:
    """One row: the metrics on the section's step, with the samples table when it builds and logs; returns
    what stopped the table (None: logged, or no rows)."""
    import wandb

    key = step_key(ns)
    if (run.id, ns) not in _DEFINED:
        run.define_metric(key)
        run.define_metric(f"{ns}/*", step_metric=key)
        run.define_metric(f"{ns}_type/*", step_metric=key)
        _DEFINED.add((run.id, ns))
    payload: dict[str, Any] = {**metrics, key: step}
    table_error: Optional[Exception] = None
    try:
        columns, rows = table()
        if rows:
            payload[f"{ns}/samples"] = wandb.Table(columns=columns, data=rows)
    except Exception as err:  # noqa: BLE001 -- the metrics go on without it
        table_error = err
    try:
        run.log(payload)
    except Exception as err:  # noqa: BLE001
        if f"{ns}/samples" not in payload:
            raise
        del payload[f"{ns}/samples"]  # the row failed as a whole (serialising the table): once more without it
        run.log(payload)
        table_error = err
    # The summary shows the latest checkpoint's evaluation, whatever order evaluations finish in.
    if step >= (run.summary.get(key) or -1):
        for k, v in metrics.items():
            if k.startswith(f"{ns}/"):
                run.summary[k] = v
        run.summary[key] = step
    return table_error
