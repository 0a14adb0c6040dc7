"""One run's checkpoint evaluations: queued, then landed in ``metrics.json`` and the run's loggers.

Two drivers share this class, so a checkpoint evaluated during training and one evaluated later are
handled by the same code: the checkpoint-eval callback (exports made while training runs) and
back-fill (exports that have no result yet, ``ifdistill-eval backfill``). Each submits ``(step,
export)`` pairs; the command comes from :func:`ifdistill.evaluator.launch.evaluator_command` with the
run's own ``eval`` and ``model`` sections; the queue's runner decides where it runs (a local process
group, a SLURM job); and every outcome is recorded:

- a result: ``metrics.json`` (with its ``source``: ``callback`` or ``backfill``), one summary line, and
  every logger at the checkpoint's step (:func:`~ifdistill.callbacks.eval_logging.log_evaluation`);
  a logger (or a part of one, the W&B samples table) that fails is one line on the console and a failure of
  that step in ``metrics.json``, and never stops the driver nor the other loggers' metrics;
- a failure (retried or given up), a skip under back-pressure, a job abandoned when training stops:
  ``metrics.json``'s ``failures`` with the reason, exit code and log tail.

Results reach ``metrics.json`` first, then the loggers; W&B writes its offline file in 32 KiB blocks, so
a process killed after a result landed leaves ``metrics.json`` holding rows its W&B folder lacks.
:meth:`CheckpointEvaluations.log_unlogged` compares the two -- ``metrics.json`` against what the run's
W&B folders of earlier launches hold (:func:`~ifdistill.tracking.wandb_offline.logged_steps`) -- and
logs each missing row at its step into the resumed W&B run, so every evaluation is in W&B exactly once.

Several benchmarks per checkpoint: ``evals`` maps a name to an eval section; the run's ``eval``
section has the name ``None`` and writes ``evals/step_X`` and ``metrics.json``'s ``checkpoints``; an
extra one named ``ifbench`` writes ``evals/ifbench/step_X`` and ``metrics.json``'s ``evals/ifbench``.
Every benchmark evaluates the same export, each with its own eval config (and so its own
``eval_config_hash``), through the same queue.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

from ifdistill.callbacks.eval_jobs import EvalEvent, EvalJob, EvalQueue
from ifdistill.callbacks.eval_logging import LoggingError, evaluation_line, log_evaluation
from ifdistill.benchmarks.registry import namespace, namespaces
from ifdistill.evaluator.output import read_results_json
from ifdistill.evaluator.results import remove_partials
from ifdistill.results import run_metrics
from ifdistill.runs.rundir import RunDir
from ifdistill.tracking.wandb_offline import WandbFilesBusy, logged_steps
from ifdistill.train.loggers import is_wandb

CommandBuilder = Callable[..., tuple[list[str], dict[str, str]]]


class CheckpointEvaluations:
    """Submit checkpoint evaluations of the run in ``run`` to ``queue``; record what comes back.

    ``evals``: ``{name: eval section}`` (the run's ``eval`` under ``None``; module docstring).
    ``source`` goes into every ``metrics.json`` entry (``callback`` | ``backfill``); back-fill's failure
    reasons start with ``backfill:``."""

    def __init__(self, run: RunDir, evals: Mapping[Optional[str], Any], *, queue: EvalQueue, source: str,
                 model_cfg: Any = None, evaluate_kind: str = "auto", devices: Optional[dict] = None,
                 log_samples: int = 64, command_builder: Optional[CommandBuilder] = None):
        if None not in evals:
            raise ValueError("evals needs the run's eval section under the name None")
        namespaces({name: _get(cfg, "benchmark") for name, cfg in evals.items()})  # two sharing W&B keys: an error
        self.run, self.evals, self.model_cfg = run, dict(evals), model_cfg
        self.queue, self.source = queue, source
        self.evaluate_kind, self.devices, self.log_samples = evaluate_kind, dict(devices or {}), log_samples
        self._command_builder = command_builder
        self.label = "checkpoint-eval" if source == "callback" else source  # the prefix of printed lines
        recorded = run_metrics.read(run.root)
        self.done: dict[Optional[str], set[int]] = {
            name: {int(s) for s in run_metrics.results_of(recorded, name)} for name in self.evals}
        self.missing: list[int] = []

    def is_done(self, step: int) -> bool:
        """Every benchmark has a result for ``step``."""
        return all(step in done for done in self.done.values())

    def unevaluated_exports(self, up_to_step: Optional[int] = None) -> dict[int, Path]:
        """The run's finished exports (up to ``up_to_step``) that lack a result of some benchmark."""
        return {step: export for step, export in self.run.finished_exports().items()
                if not self.is_done(step) and (up_to_step is None or step <= up_to_step)}

    def submit(self, step: int, export: Path) -> list[EvalEvent]:
        """Queue the evaluations of ``export`` that have no result yet, one per benchmark; returns the
        queue's new events."""
        events: list[EvalEvent] = []
        for name, eval_cfg in self.evals.items():
            if step in self.done[name]:
                continue
            out_dir = self.run.eval_dir(step, name)
            argv, env = self.command(eval_cfg, export, out_dir)
            events += self.queue.submit(EvalJob(step, export, out_dir, argv, env, benchmark=name))
        return events

    def command(self, eval_cfg: Any, export: Path, out_dir: Path) -> tuple[list[str], dict[str, str]]:
        builder = self._command_builder
        if builder is None:
            from ifdistill.evaluator.launch import evaluator_command as builder
        return builder(eval_cfg, export, out_dir, kind=self.evaluate_kind, devices=self.devices,
                       model_cfg=self.model_cfg)

    def land(self, events: Iterable[EvalEvent], loggers: Iterable[Any]) -> None:
        """Record each event (module docstring); results are logged to ``loggers``."""
        loggers = list(loggers)
        for ev in events:
            step, name = ev.job.step, ev.job.benchmark
            if ev.kind == "ok":
                self._land_result(ev.job, loggers)
            else:
                self.record_failure(step, ev.job.attempt, f"{ev.kind}: {ev.reason}", ev.exit_code, ev.log_tail,
                                    benchmark=name)
                print(f"[{self.label}] step {step}{_named(name)}: {ev.kind} ({ev.reason})", flush=True)
                if ev.kind in ("gave_up", "skipped") and step not in self.missing:
                    self.missing.append(step)
                if ev.kind == "gave_up":  # no attempt of the job runs any more: what one killed while
                    remove_partials(ev.job.out_dir)  # publishing left goes (a retry may still be publishing)

    def _land_result(self, job: EvalJob, loggers: list[Any]) -> None:
        step, name = job.step, job.benchmark
        results = read_results_json(job.out_dir)
        run_metrics.record_checkpoint(self.run.root, step, results, os.path.relpath(job.out_dir, self.run.root),
                                      self.source, benchmark=name)
        remove_partials(job.out_dir)  # what earlier attempts killed while publishing left beside it
        self.done[name].add(step)
        if self.is_done(step):
            self.missing = [s for s in self.missing if s != step]
        print(evaluation_line(step, results, self.label + _named(name, ",")), flush=True)
        self._log(loggers, step, name, results, job.out_dir, job.attempt)

    def _log(self, loggers: list[Any], step: int, name: Optional[str], results: dict, out_dir: Path,
             attempt: int) -> None:
        try:  # the result is safe in metrics.json; a logger failing must not stop the driver
            log_evaluation(loggers, step, results, out_dir, self.log_samples, section=name)
        except Exception as err:  # noqa: BLE001
            reason = str(err) if isinstance(err, LoggingError) else " ".join(repr(err).split())
            print(f"[{self.label}] step {step}{_named(name)}: logging the evaluation failed: {reason}", flush=True)
            self.record_failure(step, attempt, f"logging failed: {reason}", benchmark=name)

    def remove_partials(self) -> None:
        """Remove what evaluators killed while publishing left beside every evaluation that has its result
        (one that has none keeps them until its result lands or its job gives up, :meth:`land`)."""
        for name, done in self.done.items():
            for step in done:
                remove_partials(self.run.eval_dir(step, name))

    def unlogged(self, loggers: Iterable[Any]) -> list[tuple[Optional[str], int]]:
        """``(eval section, step)`` of every evaluation in ``metrics.json`` (any section, one a back-fill
        added too) that the run's W&B folders lack, oldest step first; empty without a W&B logger among
        ``loggers``. The folders of W&B runs the loggers have open (this launch's) are not read; an earlier
        launch's folder whose file a live process still holds raises
        :class:`~ifdistill.tracking.wandb_offline.WandbFilesBusy`."""
        loggers = [lg for lg in loggers if is_wandb(lg)]
        if not loggers:
            return []
        own = [Path(run.dir).parent for run in (getattr(lg, "_experiment", None) for lg in loggers) if run is not None]
        logged = logged_steps(self.run.logs / "wandb", exclude=own)
        recorded = run_metrics.read(self.run.root)
        lacking = []
        for name in [None, *(recorded.get("evals") or {})]:  # every section, a back-filled one too
            for step, entry in run_metrics.results_of(recorded, name).items():
                ns = namespace(name, run_metrics.benchmark_of_entry(entry, name))
                if int(step) not in logged.get(ns, {}):
                    lacking.append((name, int(step)))
        return sorted(lacking, key=lambda t: (t[1], t[0] or ""))

    def log_unlogged(self, loggers: Iterable[Any]) -> list[tuple[Optional[str], int]]:
        """Log every evaluation :meth:`unlogged` finds to the W&B loggers, at its step; returns them. While
        another live process holds one of the run's W&B files (a back-fill logging into it) nothing is
        logged -- its rows are not final -- and the next launch reconciles them."""
        loggers = [lg for lg in loggers if is_wandb(lg)]
        try:
            lacking = self.unlogged(loggers)
        except WandbFilesBusy as err:
            print(f"[{self.label}] W&B rows not reconciled in this launch: {err}", flush=True)
            return []
        recorded = run_metrics.read(self.run.root)
        for name, step in lacking:
            entry = run_metrics.results_of(recorded, name)[str(step)]
            out_dir = self.run.root / entry["results_dir"]
            print(f"[{self.label}] step {step}{_named(name)}: in metrics.json, not in W&B; logged", flush=True)
            try:
                results = read_results_json(out_dir)
            except Exception as err:  # noqa: BLE001 -- a results.json gone or damaged since it was recorded
                self.record_failure(step, 0, f"logging failed: {' '.join(str(err).split())}", benchmark=name)
                continue
            self._log(loggers, step, name, results, out_dir, 0)
        return lacking

    def record_failure(self, step: int, attempt: int, reason: str, exit_code: Optional[int] = None,
                       log_tail: str = "", *, benchmark: Optional[str] = None) -> None:
        prefix = "" if self.source == "callback" else f"{self.source}: "
        run_metrics.record_failure(self.run.root, step, attempt, prefix + reason, exit_code, log_tail[-2000:],
                                   time.time(), benchmark=benchmark)

    def record_missing(self, steps: Iterable[int], reason: str) -> None:
        """Record ``reason`` for every benchmark of each step that has no result."""
        for step in steps:
            for name, done in self.done.items():
                if step not in done:
                    self.record_failure(step, 0, reason, benchmark=name)

    def abandon(self, reason: str) -> list[int]:
        """Stop every running evaluation and forget the waiting ones, each recorded with ``reason``;
        returns their steps (a resumed run or back-fill evaluates them later)."""
        jobs = self.queue.abandon()
        for job in jobs:
            self.record_failure(job.step, job.attempt, reason[:300], benchmark=job.benchmark)
        self.queue.close()
        return sorted({job.step for job in jobs})


def _get(section: Any, key: str) -> Any:
    """``section[key]`` of a section (a dict) or a typed settings object; None when absent."""
    return section.get(key) if hasattr(section, "get") else getattr(section, key, None)


def _named(name: Optional[str], sep: str = "") -> str:
    return f"{sep} {name}" if name else ""
