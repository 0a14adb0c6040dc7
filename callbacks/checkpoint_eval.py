"""Checkpoint-eval callback: export, then evaluate each checkpoint in a separate evaluator process.

Why a separate process running ``ifdistill-eval``: in-trainer evaluation (teacher-forced metrics, the
trainer's own generate, another LoRA load path, other decoding settings) ranks runs differently from the
external evaluation (../shared/context.md, section 2). Here the *same program and the same eval config*
that a researcher runs after training scores every checkpoint, so both numbers come from one evaluator.

Flow, at every ``every_n_steps`` optimizer steps, at the end of training and with ``at_start`` before
the first step (step 0: the base model's row, evaluated by the same evaluator with the same config; with
LoRA the step-0 adapter's B matrices are zero, so it computes the base model's outputs):

1. every rank calls :func:`export_checkpoint` (gathering sharded weights is collective); global rank 0
   writes ``<run>/exports/step_XXXXXX``;
2. rank 0 queues an evaluator process (:class:`EvalQueue`): its own session, devices from config,
   an environment without the trainer's distributed variables; training goes on;
3. between steps rank 0 polls: a finished evaluation's ``results.json`` is logged to every logger at the
   checkpoint's step (W&B: ``define_metric('ifeval/*', step_metric='ifeval/step')`` — never ``step=``,
   which W&B drops for past steps), a W&B table of samples is logged, and ``metrics.json`` is updated;
   failures are retried, then recorded (exit code, log tail) — they never stop training;
4. at the end, rank 0 waits up to ``final_wait_s`` and lists what is still missing (``ifdistill-eval
   backfill`` evaluates it later into the same places, through the same
   :class:`~ifdistill.callbacks.evaluations.CheckpointEvaluations`).

Steps 2-3 are :class:`~ifdistill.callbacks.evaluations.CheckpointEvaluations`; this class decides when.
``engine=persistent`` keeps one evaluator process (``ifdistill-eval serve``) up for the whole run instead
of one per checkpoint (:mod:`ifdistill.launchers.persistent_eval`: same program, same config, same
results; a failing server hands the checkpoint to a fresh process); ``engine=process`` starts one per
checkpoint (locally, or through ``runner``, e.g. a SLURM job).
``evals`` adds benchmarks evaluated on every export next to the run's ``eval`` (``{name: eval section}``,
composed by Hydra: ``callbacks=checkpoint_eval_ifbench`` or ``+eval@callbacks.checkpoint_eval.evals.NAME=OPTION``).
Training builds the callback with the run it belongs to (``run``: an :class:`~ifdistill.runs.rundir.RunInfo`
naming the run directory, its id, config hash and base model); nothing is read back from the
LightningModule.

A run stopped early (a requeue signal, a crash: ``on_exception``) kills its running evaluations and
records them as missing. Every launch reconciles before it trains, and before it returns when nothing is
left to train (Lightning's fit loop returns at once when the restored step is ``max_steps``, without
``on_train_start`` or ``on_train_end``: ``on_fit_end`` does their work then):

- W&B (``on_fit_start``): each evaluation in ``metrics.json`` that the run's W&B folders lack -- a
  process killed after a result landed takes W&B's unwritten block with it -- is logged at its step
  into the resumed W&B run (:meth:`~ifdistill.callbacks.evaluations.CheckpointEvaluations.log_unlogged`);
- the restored step, when the settings evaluate it and it has no export (a launch killed between its
  checkpoint and its export), is exported from the restored weights, which are that step's;
- every export of an earlier launch without a result is queued first; at the end, what is still
  missing is recorded with its reason (``ifdistill-status`` lists it as an open failure).

:meth:`CheckpointEvalCallback.work_left` says what a launch at a given step would still do; training
asks it before a finished run is relaunched, and a run with nothing left is not launched again.
"""

from __future__ import annotations

import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping, Optional

from lightning.pytorch import Callback

from ifdistill.callbacks.checkpoint_eval_settings import DEFAULTS as D, CheckpointEvalSettings
from ifdistill.callbacks.eval_jobs import EvalQueue
from ifdistill.callbacks.evaluations import CheckpointEvaluations, CommandBuilder
from ifdistill.callbacks.export import export_checkpoint
from ifdistill.launchers.runners import checkpoint_eval_runner
from ifdistill.results import run_metrics
from ifdistill.runs.rundir import RunInfo, checkpoint_step


class CheckpointEvalCallback(Callback):
    #: arguments a config cannot give (preflight refuses them by name and leaves them out of its "known:" list)
    PYTHON_ONLY = {"command_builder": "a Python caller (tests, back-fill): a function building the evaluator's command"}

    def __init__(self, *, eval_cfg: Any, run: Optional[RunInfo] = None, evals: Optional[Mapping[str, Any]] = None,
                 model_cfg: Any = None,
                 every_n_steps: Optional[int] = D.every_n_steps, at_end: bool = D.at_end, at_start: bool = D.at_start,
                 export_merged: bool = D.export_merged,
                 evaluate_kind: str = D.evaluate_kind, chat_template: Optional[str] = D.chat_template,
                 max_running: int = D.max_running, max_pending: int = D.max_pending, policy: str = D.policy,
                 timeout_s: float = D.timeout_s, retries: int = D.retries, final_wait_s: float = D.final_wait_s,
                 devices: Optional[dict] = None, log_samples: int = D.log_samples, runner: Any = D.runner,
                 engine: str = D.engine, persistent: Optional[Mapping[str, Any]] = None,
                 command_builder: Optional[CommandBuilder] = None):
        """Settings and their defaults: :class:`~ifdistill.callbacks.checkpoint_eval_settings.CheckpointEvalSettings`
        (``devices``, ``persistent`` and ``evals``: None = empty)."""
        given = locals()
        CheckpointEvalSettings(**{f.name: given[f.name] for f in fields(CheckpointEvalSettings)})  # its checks
        super().__init__()
        if run is None:
            raise ValueError("CheckpointEvalCallback needs the run it belongs to (run=RunInfo(...)); "
                             "ifdistill.train.run.train passes it when it builds the callbacks")
        self.run = run
        self.every_n_steps, self.at_end, self.at_start = every_n_steps, at_end, at_start
        self.export_merged, self.chat_template = export_merged, chat_template
        self.final_wait_s = final_wait_s
        queue = EvalQueue(max_running=max_running, max_pending=max_pending, policy=policy, timeout_s=timeout_s,
                          retries=retries, runner=checkpoint_eval_runner(runner, engine, persistent))
        self.evaluations = CheckpointEvaluations(
            run.dir, {None: eval_cfg, **dict(evals or {})}, queue=queue, source="callback", model_cfg=model_cfg,
            evaluate_kind=evaluate_kind,
            devices=devices, log_samples=log_samples, command_builder=command_builder)
        self.export_seconds: list[float] = []
        self._last_submitted = -1
        self._train_started = False  # on_train_start ran in this launch (the fit loop did not return at once)

    @property
    def missing(self) -> list[int]:
        return self.evaluations.missing

    # -- hooks ----------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if trainer.is_global_zero:
            header = {"run_id": self.run.run_id, "seed": self.run.seed, "config_hash": self.run.config_hash,
                      "method": self.run.method}
            run_metrics.update(self.run.dir.root, lambda d: d.update({k: v for k, v in header.items() if v}))

    def work_left(self, step: int, max_steps: int, loggers: list) -> list[str]:
        """What a launch resuming at ``step`` (``max_steps``: the run's end) would still do, one line each:
        a due step to export, exports to evaluate, evaluations to log to W&B (``loggers``: the launch's);
        empty when nothing is missing."""
        left = [f"step {s}: exported, not evaluated" for s in self.evaluations.unevaluated_exports()]
        if self._own_unexported(step, max_steps):
            left.append(f"step {step}: checkpointed, not exported")
        from ifdistill.tracking.wandb_offline import WandbFilesBusy

        try:
            left += [f"step {s}{f' ({name})' if name else ''}: in metrics.json, not in W&B"
                     for name, s in self.evaluations.unlogged(loggers)]
        except WandbFilesBusy as err:  # a live writer: the launch says so and leaves the rows
            left.append(str(err))
        return left

    def on_fit_start(self, trainer, pl_module) -> None:
        """Log to W&B what ``metrics.json`` holds and the run's W&B folders lack (module docstring)."""
        if trainer.is_global_zero:
            self.evaluations.log_unlogged(trainer.loggers)

    def on_train_start(self, trainer, pl_module) -> None:
        """``at_start``: export and evaluate step 0 before training. A resumed run: reconcile first."""
        self._train_started = True
        if self.at_start and trainer.global_step == 0 and not self.evaluations.is_done(0):
            self._checkpoint(trainer, pl_module, 0)
        self._reconcile(trainer, pl_module)

    def on_fit_end(self, trainer, pl_module) -> None:
        """The fit loop returned at once (the restored step is ``max_steps``): reconcile and end here."""
        if not self._train_started:
            self._reconcile(trainer, pl_module)
            self._finish(trainer)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """Training stops early: stop the evaluations (their processes would outlive the trainer) and
        record them as missing; a resumed run queues them again, or ``ifdistill-eval backfill`` does."""
        if trainer.is_global_zero:
            self.evaluations.abandon(f"training stopped: {exception!r}")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self._due(step, trainer.max_steps) and not self.evaluations.is_done(step) and self._last_submitted != step:
            self._checkpoint(trainer, pl_module, step)
        if trainer.is_global_zero:
            self._land(trainer, self.evaluations.queue.poll())

    def on_validation_end(self, trainer, pl_module) -> None:
        """Keep the held-out teacher-forced metrics per step in metrics.json, next to the IFEval results
        (the report plots one against the other)."""
        if trainer.is_global_zero and not trainer.sanity_checking:
            tf = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}
            if tf:
                run_metrics.record_train_metrics(self.run.dir.root, trainer.global_step, tf)

    def on_train_end(self, trainer, pl_module) -> None:
        step = trainer.global_step
        if self.at_end and step > 0 and not self.evaluations.is_done(step) and self._last_submitted != step:
            self._checkpoint(trainer, pl_module, step)
        self._finish(trainer)

    # -- internals ------------------------------------------------------------------------------
    def _due(self, step: int, max_steps: int) -> bool:
        """Whether the settings evaluate ``step`` (``max_steps``: where training ends)."""
        every = bool(self.every_n_steps) and step % self.every_n_steps == 0
        return step > 0 and (every or (self.at_end and step == max_steps))

    def _own_unexported(self, step: int, max_steps: int) -> bool:
        """Whether ``step`` is due, checkpointed by this run (not restored from another run's checkpoint,
        ``run.resume_from``) and not exported."""
        return (self._due(step, max_steps)
                and any(checkpoint_step(p) == step for p in self.run.dir.checkpoints.glob("step=*.ckpt"))
                and step not in self.run.dir.finished_exports())

    def _reconcile(self, trainer, pl_module) -> None:
        """Export the restored step when it is due and has no export (every rank: exporting is collective;
        rank 0's answer counts), then queue the exports of earlier launches that have no result."""
        step = trainer.global_step
        export = self._own_unexported(step, trainer.max_steps) and not self.evaluations.is_done(step) \
            and self._last_submitted != step
        if trainer.strategy.broadcast(export, src=0):
            print(f"[checkpoint-eval] step {step}: checkpointed by an earlier launch, not exported; exporting it",
                  flush=True)
            self._checkpoint(trainer, pl_module, step)
        if not trainer.is_global_zero:
            return
        self.evaluations.remove_partials()
        for done, export_dir in self.evaluations.unevaluated_exports(up_to_step=step).items():
            if done == self._last_submitted:  # just exported and queued here
                continue
            print(f"[checkpoint-eval] step {done}: exported by an earlier launch, not evaluated yet; queued",
                  flush=True)
            self._land(trainer, self.evaluations.submit(done, export_dir))

    def _finish(self, trainer) -> None:
        """Wait up to ``final_wait_s`` for the queued evaluations, then record what is still missing."""
        if not trainer.is_global_zero:
            return
        self.evaluations.queue.drain(self.final_wait_s, each=lambda events: self._land(trainer, events))
        left = self.evaluations.queue.abandon()
        self.evaluations.queue.close()
        missing = sorted({j.step for j in left} | set(self.evaluations.missing))
        self.evaluations.missing = missing
        if missing:
            print(f"[checkpoint-eval] evaluations still missing for steps {missing}; re-run the same command "
                  f"or `ifdistill-eval backfill run_dir={self.run.dir.root}` to complete them")
            self.evaluations.record_missing(missing, "missing at end of training")

    def _checkpoint(self, trainer, pl_module, step: int) -> None:
        t0 = time.perf_counter()
        export = export_checkpoint(
            trainer, pl_module.model, self.run.dir.exports, step=step, base_model=self.run.base_model,
            tokenizer_src=self.run.base_model, config_hash=self.run.config_hash,
            merged=self.export_merged, chat_template=self.chat_template)
        self._last_submitted = step
        if not trainer.is_global_zero:
            return
        self.export_seconds.append(time.perf_counter() - t0)
        self._land(trainer, self.evaluations.submit(step, Path(export)))

    def _land(self, trainer, events: list) -> None:
        self.evaluations.land(events, trainer.loggers)
