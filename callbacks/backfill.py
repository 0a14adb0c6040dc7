"""``ifdistill-eval backfill run_dir=DIR [steps=[200,400]] [devices={...}]``: evaluate a run's missing checkpoints.

An evaluation can be missing because it crashed past its retries, timed out, was skipped under back-
pressure, or training ended before it finished. Back-fill evaluates every export under
``<run>/exports`` that has no result in ``metrics.json`` — with the run's own resolved ``eval`` and
``model`` sections (from ``config.yaml``), through the same :func:`evaluator_command` the callback uses —
and lands the results in the same places: ``<run>/evals/step_X``, ``metrics.json`` (``source: backfill``)
and the run's loggers (the W&B run of the same id is resumed; values sit on the ``ifeval/step`` axis).

Every export is verified against the sha256 digests of its ``export.json`` first
(:func:`~ifdistill.evaluator.model_source.verify_export`, all parts): a corrupt export is recorded as a
failure naming the file and no evaluator is started for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf

from ifdistill.callbacks.eval_logging import log_evaluation
from ifdistill.callbacks.export import finished_exports, step_dir_name
from ifdistill.results import run_metrics


def missing_steps(run_dir: Path) -> list[int]:
    done = {int(s) for s in run_metrics.read(run_dir)["checkpoints"]}
    return [step for step in finished_exports(run_dir / "exports") if step not in done]


def backfill(run_dir: str | os.PathLike, *, steps: Sequence[int] | None = None, devices: dict | None = None,
             log: bool = True, timeout_s: float | None = None) -> dict[int, str]:
    """Evaluate the missing (or the given) steps; returns {step: "ok" | failure reason}."""
    from ifdistill.evaluator.errors import CorruptExportError
    from ifdistill.evaluator.launch import evaluator_command
    from ifdistill.evaluator.model_source import verify_export

    run_dir = Path(run_dir).absolute()
    cfg = OmegaConf.load(run_dir / "config.yaml")
    todo = list(steps) if steps else missing_steps(run_dir)
    outcome: dict[int, str] = {}
    loggers = _loggers(cfg, run_dir) if log and todo else []
    for step in todo:
        export = run_dir / "exports" / step_dir_name(step)
        out_dir = run_dir / "evals" / step_dir_name(step)
        try:
            verify_export(export)
        except CorruptExportError as err:
            print(f"[backfill] step {step}: {err}", flush=True)
            run_metrics.record_failure(run_dir, step, 0, f"backfill: {err}", None, "", time.time())
            outcome[step] = str(err)
            continue
        argv, env = evaluator_command(cfg.eval, export, out_dir, devices=devices, model_cfg=cfg.model)
        log_path = out_dir.parent / f"{out_dir.name}.backfill.log"
        print(f"[backfill] step {step}: evaluating {export}", flush=True)
        with open(log_path, "wb") as f:
            proc = subprocess.run(argv, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s)
        if proc.returncode != 0 or not (out_dir / "results.json").is_file():
            reason = f"exit code {proc.returncode} (log: {log_path})"
            run_metrics.record_failure(run_dir, step, 0, f"backfill: {reason}", proc.returncode,
                                       log_path.read_text(errors="replace")[-2000:], time.time())
            outcome[step] = reason
            continue
        results = json.loads((out_dir / "results.json").read_text())
        run_metrics.record_checkpoint(run_dir, step, results, os.path.relpath(out_dir, run_dir), "backfill")
        log_evaluation(loggers, step, results, out_dir)
        outcome[step] = "ok"
    for logger in loggers:
        if type(logger).__name__ == "WandbLogger":
            logger.experiment.finish()
    return outcome


def _loggers(cfg: Any, run_dir: Path) -> list:
    from ifdistill.train.rundir import RunDir
    from ifdistill.train.run import build_loggers

    meta = json.loads((run_dir / "run.json").read_text())
    return build_loggers(cfg, RunDir(run_dir), meta["run_id"])


def main(argv: Sequence[str] | None = None) -> int:
    args = OmegaConf.from_dotlist(list(sys.argv[1:] if argv is None else argv))
    if not args.get("run_dir"):
        print("usage: ifdistill-eval backfill run_dir=RUN_DIR [steps=[200,400]] [devices={cpu_threads_bind: '1'}] "
              "[log=true]", file=sys.stderr)
        return 2
    run_dir = Path(str(args.run_dir))
    if not (run_dir / "run.json").is_file():
        print(f"ifdistill-eval backfill: {run_dir} is not a training run directory (no run.json)", file=sys.stderr)
        return 2
    steps = [int(s) for s in args.get("steps") or []]
    devices = OmegaConf.to_container(args.devices) if args.get("devices") else None
    outcome = backfill(run_dir, steps=steps or None, devices=devices, log=bool(args.get("log", True)))
    if not outcome:
        print(f"[backfill] nothing to do: every export of {run_dir} has a result")
    for step, what in sorted(outcome.items()):
        print(f"[backfill] step {step}: {what}")
    return 0 if all(v == "ok" for v in outcome.values()) else 1
