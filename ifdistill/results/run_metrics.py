"""A run's ``metrics.json``: the one file that holds every IFEval result of a training run.

The checkpoint-eval callback appends one entry per evaluated checkpoint (and failures), ``ifdistill-eval``
back-fills missing ones into the same file, and ``ifdistill-report`` reads it. Keeping it in the run
directory (not only in W&B) makes results comparable offline and lets a results table be rendered from
files instead of edited by hand.

Layout::

    {"run_id": str, "config_hash": str, "seed": int | null, "method": str | null,
     "config": {...key config values...},
     "checkpoints": {"<step>": {"step": int, "eval_config_hash": str, "results_dir": str,
                                "metrics": {...aggregates with _stderr...},
                                "per_instruction_type": {...}, "source": "callback" | "backfill",
                                "time": float}},
     "failures": [{"step": int, "attempt": int, "reason": str, "exit_code": int | null,
                   "stderr_tail": str, "time": float}],
     "train": {"<step>": {"train/tfa": ..., ...}}}

``attempt`` in a failure is the writer's count within one launch (0: no evaluator ran for this record,
e.g. "missing at end of training"); :func:`failure_history` numbers the attempts of a step across
launches and marks the failures a later result of the same step superseded.

Writes are atomic (temp file + ``os.replace``) under an advisory lock, so a back-fill running next to a
training job cannot lose an entry.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ifdistill.paths import atomic_write

FILENAME = "metrics.json"


def empty(run_id: str = "", config_hash: str = "", **info: Any) -> dict:
    return {"run_id": run_id, "config_hash": config_hash, "seed": info.pop("seed", None),
            "method": info.pop("method", None), "config": info.pop("config", {}),
            "checkpoints": {}, "failures": [], "train": {}, **info}


def read(run_dir: str | os.PathLike) -> dict:
    path = Path(run_dir) / FILENAME
    if not path.is_file():
        return empty()
    return json.loads(path.read_text())


def write_atomic(path: Path, payload: Any) -> None:
    """JSON to ``path`` via a temp file in the same folder and ``os.replace``."""
    with atomic_write(path) as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.write("\n")


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
        change(data)
        write_atomic(run_dir / FILENAME, data)
    return data


def record_checkpoint(run_dir, step: int, results: dict, results_dir: str, source: str) -> dict:
    """Store one evaluation (``results`` is the evaluator's results.json content)."""
    entry = {
        "step": int(step),
        "eval_config_hash": results.get("eval_config_hash"),
        "results_dir": str(results_dir),
        "metrics": results.get("metrics", {}),
        "per_instruction_type": results.get("per_instruction_type", {}),
        "source": source,
        "time": time.time(),
    }
    return update(run_dir, lambda d: d["checkpoints"].__setitem__(str(int(step)), entry))


def record_failure(run_dir, step: int, attempt: int, reason: str, exit_code: int | None,
                   stderr_tail: str, when: float) -> dict:
    failure = {"step": int(step), "attempt": attempt, "reason": reason, "exit_code": exit_code,
               "stderr_tail": stderr_tail, "time": when}
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
    - ``resolved``: the step has a result recorded after the failure (a result without a time, from an
      older file, resolves every failure of its step).
    """
    done = data.get("checkpoints") or {}
    out, counts, previous = [], {}, {}
    for f in sorted(data.get("failures") or [], key=lambda f: (f.get("time") or 0.0)):
        step = f.get("step")
        attempt = int(f.get("attempt") or 0)
        prev = previous.get(step)
        reason = str(f.get("reason", ""))
        waiting = prev is not None and reason.startswith("training stopped") and prev.get("attempt") == attempt
        number = None
        if attempt > 0 and not waiting and not reason.startswith("logging failed"):
            counts[step] = counts.get(step, 0) + 1
            number = counts[step]
        elif waiting:
            number = prev["attempt_no"]
        result = done.get(str(step))
        resolved = result is not None and (result.get("time") is None or result["time"] >= (f.get("time") or 0.0))
        entry = {**f, "attempt_no": number, "resolved": resolved}
        previous[step] = entry
        out.append(entry)
    return out
