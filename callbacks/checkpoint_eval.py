"""Checkpoint-eval callback: export, then evaluate each checkpoint in a separate evaluator process.

Why a separate process running ``ifdistill-eval``: in-trainer evaluation (teacher-forced metrics, the
trainer's own generate, another LoRA load path, other decoding settings) ranks runs differently from the
external evaluation (../shared/context.md, section 2). Here the *same program and the same eval config*
that a researcher runs after training scores every checkpoint, so both numbers come from one evaluator.

Flow, at every ``every_n_steps`` optimizer steps and at the end of training:

1. every rank calls :func:`export_checkpoint` (gathering sharded weights is collective); global rank 0
   writes ``<run>/exports/step_XXXXXX``;
2. rank 0 queues an evaluator process (:class:`EvalQueue`): its own session, devices from config,
   an environment without the trainer's distributed variables; training goes on;
3. between steps rank 0 polls: a finished evaluation's ``results.json`` is logged to every logger at the
   checkpoint's step (W&B: ``define_metric('ifeval/*', step_metric='ifeval/step')`` — never ``step=``,
   which W&B drops for past steps), a W&B table of samples is logged, and ``metrics.json`` is updated;
   failures are retried, then recorded (exit code, log tail) — they never stop training;
4. at the end, rank 0 waits up to ``final_wait_s`` and lists what is still missing (``ifdistill-eval
   backfill`` evaluates it later into the same places).

A run stopped early (a requeue signal, a crash: ``on_exception``) kills its running evaluations and
records them as missing; when the run resumes, exports of earlier launches that have no result yet are
queued again first (``on_train_start``), so a preempted sweep still ends with every checkpoint scored.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from lightning.pytorch import Callback

from ifdistill.callbacks.eval_jobs import EvalEvent, EvalJob, EvalQueue
from ifdistill.callbacks.export import export_checkpoint, finished_exports, step_dir_name
from ifdistill.callbacks.eval_logging import evaluation_line, log_evaluation
from ifdistill.results import run_metrics


class CheckpointEvalCallback(Callback):
    def __init__(self, *, eval_cfg: Any, model_cfg: Any = None, every_n_steps: int = 200, at_end: bool = True,
                 export_merged: bool = False, evaluate_kind: str = "auto", run_dir: str | None = None,
                 base_model: str | None = None, chat_template: str | None = None,
                 max_running: int = 1, max_pending: int = 4, policy: str = "wait",
                 timeout_s: float = 3600.0, retries: int = 1, final_wait_s: float = 1800.0,
                 devices: dict | None = None, log_samples: int = 64,
                 runner: Any = None,
                 command_builder: Callable[..., tuple[list[str], dict[str, str]]] | None = None):
        super().__init__()
        if every_n_steps is not None and every_n_steps <= 0:
            raise ValueError("every_n_steps must be positive (or null to evaluate only at the end)")
        self.eval_cfg, self.model_cfg = eval_cfg, model_cfg
        if runner is not None and not hasattr(runner, "start"):  # a config node with _target_
            from hydra.utils import instantiate

            runner = instantiate(runner)
        self.every_n_steps, self.at_end = every_n_steps, at_end
        self.export_merged, self.evaluate_kind = export_merged, evaluate_kind
        self.run_dir = Path(run_dir) if run_dir else None
        self.base_model, self.chat_template = base_model, chat_template
        self.final_wait_s, self.devices, self.log_samples = final_wait_s, dict(devices or {}), log_samples
        self.queue = EvalQueue(max_running=max_running, max_pending=max_pending, policy=policy,
                               timeout_s=timeout_s, retries=retries, runner=runner)
        self._command_builder = command_builder
        self._done_steps: set[int] = set()
        self.missing: list[int] = []
        self.export_seconds: list[float] = []

    # -- hooks ----------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if self.run_dir is None:
            self.run_dir = Path(getattr(pl_module, "run_dir", None) or trainer.default_root_dir)
        if self.base_model is None:
            self.base_model = getattr(pl_module, "base_model_path", None)
        if trainer.is_global_zero:
            header = {"run_id": getattr(pl_module, "run_id", None) or "", "seed": dict(getattr(pl_module, "hparams", {}) or {}).get("seed"),
                      "config_hash": getattr(pl_module, "config_hash", "") or "",
                      "method": type(pl_module).__name__}
            existing = run_metrics.update(self.run_dir, lambda d: d.update({k: v for k, v in header.items() if v}))
            self._done_steps = {int(s) for s in existing["checkpoints"]}

    def on_train_start(self, trainer, pl_module) -> None:
        """A resumed run: evaluate the finished exports of earlier launches that have no result yet."""
        if not trainer.is_global_zero:
            return
        for step, export in finished_exports(self.run_dir / "exports").items():
            if step <= trainer.global_step and step not in self._done_steps:
                print(f"[checkpoint-eval] step {step}: exported by an earlier launch, not evaluated yet; queued")
                self._submit(trainer, step, export)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """Training stops early: stop the evaluations (their processes would outlive the trainer) and
        record them as missing; a resumed run queues them again, or ``ifdistill-eval backfill`` does."""
        if not trainer.is_global_zero:
            return
        for job in self.queue.abandon():
            run_metrics.record_failure(self.run_dir, job.step, job.attempt,
                                       f"training stopped: {exception!r}"[:300], None, "", time.time())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        due = self.every_n_steps and step > 0 and step % self.every_n_steps == 0
        if due and step not in self._done_steps and self._last_submitted != step:
            self._checkpoint(trainer, pl_module, step)
        if trainer.is_global_zero:
            self._handle(trainer, self.queue.poll())

    def on_validation_end(self, trainer, pl_module) -> None:
        """Keep the held-out teacher-forced metrics per step in metrics.json, next to the IFEval results
        (the report plots one against the other)."""
        if trainer.is_global_zero and not trainer.sanity_checking:
            tf = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
            if tf:
                run_metrics.record_train_metrics(self.run_dir, trainer.global_step, tf)

    def on_train_end(self, trainer, pl_module) -> None:
        step = trainer.global_step
        if self.at_end and step > 0 and step not in self._done_steps and self._last_submitted != step:
            self._checkpoint(trainer, pl_module, step)
        if not trainer.is_global_zero:
            return
        self._handle(trainer, self.queue.drain(self.final_wait_s))
        left = self.queue.abandon()
        self.missing = sorted({j.step for j in left} | set(self.missing))
        if self.missing:
            print(f"[checkpoint-eval] evaluations still missing for steps {self.missing}; "
                  f"run `ifdistill-eval backfill run_dir={self.run_dir}` to complete them")
            for s in self.missing:
                run_metrics.record_failure(self.run_dir, s, 0, "missing at end of training", None, "", time.time())

    # -- internals ------------------------------------------------------------------------------
    _last_submitted: int = -1

    def _checkpoint(self, trainer, pl_module, step: int) -> None:
        t0 = time.perf_counter()
        export = export_checkpoint(
            trainer, pl_module.model, self.run_dir / "exports", step=step, base_model=self.base_model,
            tokenizer_src=self.base_model, config_hash=getattr(pl_module, "config_hash", ""),
            merged=self.export_merged, chat_template=self.chat_template)
        self._last_submitted = step
        if not trainer.is_global_zero:
            return
        self.export_seconds.append(time.perf_counter() - t0)
        self._submit(trainer, step, export)

    def _submit(self, trainer, step: int, export: Path) -> None:
        out_dir = self.run_dir / "evals" / step_dir_name(step)
        argv, env = self._command(export, out_dir)
        self._handle(trainer, self.queue.submit(EvalJob(step, export, out_dir, argv, env)))

    def _command(self, export: Path, out_dir: Path) -> tuple[list[str], dict[str, str]]:
        builder = self._command_builder
        if builder is None:
            from ifdistill.evaluator.launch import evaluator_command as builder
        return builder(self.eval_cfg, export, out_dir, kind=self.evaluate_kind, devices=self.devices,
                       model_cfg=self.model_cfg)

    def _handle(self, trainer, events: list[EvalEvent]) -> None:
        for ev in events:
            step = ev.job.step
            if ev.kind == "ok":
                results = json.loads((ev.job.out_dir / "results.json").read_text())
                run_metrics.record_checkpoint(self.run_dir, step, results, os.path.relpath(ev.job.out_dir, self.run_dir),
                                              "callback")
                self._done_steps.add(step)
                print(evaluation_line(step, results), flush=True)
                try:  # a logger failing must not stop training; the result is safe in metrics.json
                    log_evaluation(trainer.loggers, step, results, ev.job.out_dir, self.log_samples)
                except Exception as err:  # noqa: BLE001
                    print(f"[checkpoint-eval] step {step}: logging the evaluation failed: {err!r}")
                    run_metrics.record_failure(self.run_dir, step, ev.job.attempt, f"logging failed: {err!r}",
                                               None, "", time.time())
                self.missing = [s for s in self.missing if s != step]
            else:
                run_metrics.record_failure(self.run_dir, step, ev.job.attempt, f"{ev.kind}: {ev.reason}",
                                           ev.exit_code, ev.log_tail[-2000:], time.time())
                print(f"[checkpoint-eval] step {step}: {ev.kind} ({ev.reason})")
                if ev.kind in ("gave_up", "skipped"):
                    self.missing.append(step)

