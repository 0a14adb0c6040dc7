"""A run's ``metrics.json``: the one file that holds every IFEval result of a training run.

The checkpoint-eval callback appends one entry per evaluated checkpoint (and failures), ``ifdistill-eval``
back-fills missing ones into the same file, and ``ifdistill-report`` reads it. Keeping it in the run
directory (not only in W&B) makes results comparable offline and lets a results table be rendered from
files instead of edited by hand.

Layout::

    {"run_id": str, "config_hash": str, "seed": int | null, "method": str | null,
     "config": {...key config values...},
     "checkpoints": {"<step>": {"step": int, "eval_config_hash": str, "benchmark": str, "results_dir": str,
                                "metrics": {...aggregates with _stderr...},
                                "per_instruction_type": {...}, "source": "callback" | "backfill",
                                "time": float}},
     "evals": {"<name>": {"<step>": {...as under checkpoints...}}},
     "failures": [{"step": int, "attempt": int, "reason": str, "exit_code": int | null,
                   "stderr_tail": str, "time": float, "benchmark"?: str}],
     "train": {"<step>": {"train/tfa": ..., ...}},
     "state"?: "diverged", "divergence"?: {"step", "quantity", "policy", "skipped", "checkpoint", "time"},
     "nonfinite_skipped"?: [{"step": int, "quantity": "loss" | "gradient"}]}

``state``/``divergence`` and ``nonfinite_skipped`` are written by training's divergence guard
(:mod:`ifdistill.train.nonfinite`): a run stopped on a non-finite value, and the steps it skipped.

``checkpoints`` holds the evaluations with the run's ``eval`` section; a run that evaluates more
benchmarks per checkpoint (``callbacks.checkpoint_eval.evals``) keeps each under ``evals/<name>``, and
a failure of one of those names it in ``benchmark``. :func:`results_of` reads either.

``attempt`` in a failure is the writer's count within one launch (0: no evaluator ran for this record,
e.g. "missing at end of training"); :func:`failure_history` numbers the attempts of a step across
launches and marks the failures a later result of the same step superseded.

Writes are atomic (temp file + ``os.replace``) under an advisory lock, so a back-fill running next to a
training job cannot lose an entry. Each write records ``checksum`` (:mod:`ifdistill.checksum`);
:func:`read` refuses a file edited or truncated after it was written.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ifdistill import checksum
from ifdistill.benchmarks import registry
from ifdistill.benchmarks.registry import benchmark_of
from ifdistill.paths import write_json_atomic
from ifdistill.runs.rundir import METRICS_JSON as FILENAME

def empty(run_id: str = "", config_hash: str = "", **info: Any) -> dict:
    return {"run_id": run_id, "config_hash": config_hash, "seed": info.pop("seed", None),
            "method": info.pop("method", None), "config": info.pop("config", {}),
            "checkpoints": {}, "failures": [], "train": {}, **info}


class MetricsFileError(ValueError):
    """A metrics.json that cannot be read (not JSON, truncated, or edited after writing); names the file."""


def read(run_dir: str | os.PathLike) -> dict:
    """The run's metrics.json (an empty one when there is none yet), verified against its checksum."""
    path = Path(run_dir) / FILENAME
    if not path.is_file():
        return empty()
    return checksum.read_verified(path, MetricsFileError)


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / f".{FILENAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def update(run_dir: str | os.PathLike, change: Callable[[dict], None]) -> dict:
    """Read, apply ``change`` in place, write back atomically; returns the new content."""
    run_dir = Path(run_dir)
    with _locked(run_dir):
        data = read(run_dir)
        data.pop(checksum.FIELD, None)
        change(data)
        write_json_atomic(run_dir / FILENAME, checksum.seal(data, default=str))
    return data


def benchmark_of_entry(entry: dict, section: str | None = None) -> str:
    """The benchmark of a ``checkpoints`` / ``evals`` entry: recorded in it, else (entries written before
    it was) the section's name when that is a benchmark's, else the one claiming its first metric's name
    (:func:`ifdistill.benchmarks.registry.claiming`)."""
    if entry.get("benchmark"):
        return str(entry["benchmark"])
    if section in registry.names():
        return str(section)
    return next((b for b in map(registry.claiming, entry.get("metrics") or {}) if b), registry.default_name())


def results_of(data: dict, benchmark: str | None = None) -> dict:
    """``{"<step>": entry}`` of the run's ``eval`` section (``benchmark`` None) or of an extra benchmark."""
    if benchmark is None:
        return data.get("checkpoints") or {}
    return (data.get("evals") or {}).get(benchmark) or {}


def record_checkpoint(run_dir, step: int, results: dict, results_dir: str, source: str,
                      benchmark: str | None = None) -> dict:
    """Store one evaluation (``results`` is the evaluator's results.json content)."""
    entry = {
        "step": int(step),
        "eval_config_hash": results.get("eval_config_hash"),
        "benchmark": benchmark_of(results),
        "results_dir": str(results_dir),
        "metrics": results.get("metrics", {}),
        "per_instruction_type": results.get("per_instruction_type", {}),
        "source": source,
        "time": time.time(),
    }

    def change(d: dict) -> None:
        target = d["checkpoints"] if benchmark is None else d.setdefault("evals", {}).setdefault(benchmark, {})
        target[str(int(step))] = entry

    return update(run_dir, change)


def record_failure(run_dir, step: int, attempt: int, reason: str, exit_code: int | None,
                   stderr_tail: str, when: float, benchmark: str | None = None) -> dict:
    failure = {"step": int(step), "attempt": attempt, "reason": reason, "exit_code": exit_code,
               "stderr_tail": stderr_tail, "time": when, **({"benchmark": benchmark} if benchmark else {})}
    return update(run_dir, lambda d: d["failures"].append(failure))


def record_train_metrics(run_dir, step: int, values: dict) -> dict:
    def change(d):
        d.setdefault("train", {}).setdefault(str(int(step)), {}).update(values)

    return update(run_dir, change)


def failure_history(data: dict) -> list[dict]:
    """The failures of a metrics.json, oldest first, each with two added keys:

    - ``attempt_no``: the evaluator run's number for its step across all launches (1, 2, 3, ... in time
      order); None for a record of no evaluator run (``attempt`` 0) and for a logger that failed after
      a good evaluation; the "training stopped" record of a job that was waiting for its retry (same
      per-launch attempt as the failure before it) keeps that failure's number;
    - ``resolved``: the step has a result of the same benchmark recorded after the failure (a result
      without a time, from an older file, resolves every failure of its step).
    """
    out, counts, previous = [], {}, {}
    for f in sorted(data.get("failures") or [], key=lambda f: (f.get("time") or 0.0)):
        key = (f.get("step"), f.get("benchmark"))  # attempts are counted per step and benchmark
        attempt = int(f.get("attempt") or 0)
        prev = previous.get(key)
        reason = str(f.get("reason", ""))
        waiting = prev is not None and reason.startswith("training stopped") and prev.get("attempt") == attempt
        number = None
        if attempt > 0 and not waiting and not reason.startswith("logging failed"):
            counts[key] = counts.get(key, 0) + 1
            number = counts[key]
        elif waiting:
            number = prev["attempt_no"]
        result = results_of(data, f.get("benchmark")).get(str(f.get("step")))
        resolved = result is not None and (result.get("time") is None or result["time"] >= (f.get("time") or 0.0))
        entry = {**f, "attempt_no": number, "resolved": resolved}
        previous[key] = entry
        out.append(entry)
    return out
