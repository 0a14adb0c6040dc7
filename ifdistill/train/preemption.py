"""Preemption and time limits: on SIGUSR2 save a checkpoint at the next optimizer step, then requeue.

SLURM (through submitit, ``hydra/launcher=slurm``) sends USR2 ``signal_delay_s`` before a job's time
limit, and a preempting scheduler (Slurm >= 23.02 ``send_user_signal``, or ``scancel --signal=USR2``)
sends it before a preemption. submitit's own USR2 handler requeues the job at once and exits -- from
whatever line the training loop is at, with nothing saved since the last periodic checkpoint. So the
handler installed here only *notes* the signal; at the next optimizer-step boundary (every rank agrees
through one all-reduce of a flag, so all ranks stop at the same step):

1. the step is saved (at the end of its last micro-batch) through :class:`~ifdistill.train.checkpointing.StepCheckpoint` (same file name and
   ``keep_last`` accounting as the periodic checkpoints, so the re-run's
   :func:`~ifdistill.train.checkpointing.find_resume_checkpoint` picks it up, with the data order and
   RNG state of that step);
2. :class:`TrainingPreempted`, raised when the next batch starts (once the step's metrics are logged),
   unwinds the fit (callbacks see ``on_exception``: the checkpoint-eval
   callback stops its evaluators and records them as missing; a resumed run re-queues them);
3. :func:`ifdistill.train.run.train` catches it and calls :meth:`RequeueOnSignal.requeue`: submitit's
   handler when there is one (it pickles the Hydra job and runs ``scontrol requeue``; the requeued job
   re-composes the same config, so the same run directory and W&B run id), ``scontrol requeue`` under
   a plain ``sbatch --signal=USR2@...`` job, and outside SLURM nothing: the run stops cleanly and the
   same command resumes it.

SIGTERM under submitit: Slurm sends TERM when it preempts or requeues; submitit ignores it by design
(``Bypassing signal SIGTERM``: USR2 is the signal to act on), but Lightning would turn it into an
exception that ends the job as FAILED before USR2 arrives. Under submitit it is therefore only logged.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from typing import Any, Optional

from lightning.pytorch import Callback

log = logging.getLogger(__name__)


class TrainingPreempted(Exception):
    """Raised at an optimizer-step boundary after a requeue signal; the checkpoint of ``step`` exists."""

    def __init__(self, step: int, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name} at step {step}; checkpoint saved")
        self.step, self.signum = step, signum


def under_submitit() -> bool:
    return os.environ.get("SUBMITIT_EXECUTOR") == "slurm"


class RequeueOnSignal(Callback):
    """Checkpoint at the next optimizer step after ``signum`` (default SIGUSR2), then stop for a requeue."""

    def __init__(self, checkpoint: Any, signum: int = signal.SIGUSR2):
        self.checkpoint = checkpoint  # the run's StepCheckpoint
        self.signum = int(signum)
        self.received: Optional[int] = None
        self.previous: Any = None  # the handler found at start (submitit's, under hydra/launcher=slurm)
        self._seen_step = -1
        self._stop: Optional[TrainingPreempted] = None

    # -- signal handling (main thread only: Python delivers signals there) -------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.warning("training runs outside the main thread: no requeue-on-signal handler")
            return
        self.previous = signal.getsignal(self.signum)  # Lightning has registered its handlers by now
        signal.signal(self.signum, self._note)
        if under_submitit():
            signal.signal(signal.SIGTERM, _log_sigterm)
        self._seen_step = trainer.global_step

    def _note(self, signum: int, frame: Any) -> None:
        if self.received is None:
            log.warning("received %s: saving a checkpoint at the next optimizer step, then stopping for a "
                        "requeue", signal.Signals(signum).name)
        self.received = signum

    # -- acting on it at a step boundary ------------------------------------------------------------
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self._seen_step:  # inside an accumulation window
            return
        self._seen_step = trainer.global_step
        if not trainer.strategy.reduce_boolean_decision(self.received is not None, all=False):
            return
        self.checkpoint.save_now(trainer)
        self._stop = TrainingPreempted(trainer.global_step, self.received or self.signum)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # Stop only now, not in on_train_batch_end: the saved step's own metrics are logged after the
        # batch-end hooks, and the checkpoint-eval callback's hook still exports a due checkpoint.
        if self._stop is not None:
            raise self._stop

    def requeue(self, stop: TrainingPreempted, *, global_rank: int, loggers: list = ()) -> str:
        """Hand the job back to the scheduler; returns what was done (logged by train()).

        W&B runs are closed first (marked as preempting): the requeue makes Slurm send TERM to every
        process of the job, and W&B's service process exits on TERM (wandb/wandb#9963), which would lose
        the end of this launch's history. The requeued job resumes the same W&B run id."""
        for lg in loggers:
            run = getattr(lg, "_experiment", None)
            if run is not None and hasattr(run, "mark_preempting"):
                run.mark_preempting()
                run.finish()
        previous = self.previous
        if callable(previous) and under_submitit():
            # submitit: on global rank 0 it pickles the job, runs `scontrol requeue` and exits the process;
            # on other ranks it returns (Slurm ends them with the requeue).
            previous(stop.signum, None)
            return "left to submitit"
        job = os.environ.get("SLURM_JOB_ID")  # an array task's own id: scontrol requeues just that task
        if job is None:
            return "not under SLURM: re-run the same command to resume"
        if global_rank != 0:
            return "rank 0 requeues"
        out = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"scontrol requeue {job} failed ({out.returncode}): {out.stderr.strip()}")
        return f"scontrol requeue {job}"


def _log_sigterm(signum: int, frame: Any) -> None:
    log.warning("SIGTERM ignored under submitit (USR2 triggers checkpoint and requeue)")
