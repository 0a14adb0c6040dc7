"""A training-side kill point for relaunch tests: ``kill -9`` of the trainer at an exact state.

Added to a run like any callback of the ``callbacks`` group (``+callbacks.kill_point._target_=...``; the
``callbacks`` section is not part of the config hash, so the relaunch without it resumes the same run).
It fires once: a marker file records that it did, so the same command line can be relaunched as is.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from lightning.pytorch import Callback


class KillAtFinalStep(Callback):
    """At the end of the final step's epoch hooks -- after the step's checkpoint and export are written
    and its evaluation is queued -- wait until the evaluations of ``landed`` are recorded (metrics.json and
    the loggers), check that the final step has a checkpoint and an export and no result yet, then SIGKILL
    the process: the state of a trainer killed while its final evaluation runs."""

    def __init__(self, marker: str, landed: list[int]):
        self.marker, self.landed = Path(marker), [int(s) for s in landed]

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        step = trainer.global_step
        if self.marker.exists() or step < trainer.max_steps:
            return
        from ifdistill.callbacks.checkpoint_eval import CheckpointEvalCallback

        evaluating = next(c for c in trainer.callbacks if isinstance(c, CheckpointEvalCallback))
        deadline = time.monotonic() + 600
        while not all(evaluating.evaluations.is_done(s) for s in self.landed):
            assert time.monotonic() < deadline, f"steps {self.landed} did not land"
            evaluating._land(trainer, evaluating.evaluations.queue.poll())
            time.sleep(0.1)
        run = evaluating.run.dir
        assert (run.checkpoints / f"step={step:06d}.ckpt").is_file(), "the final checkpoint is not written yet"
        assert step in run.finished_exports(), "the final export is not written yet"
        assert not (run.eval_dir(step) / "results.json").exists(), "the final evaluation finished already"
        self.marker.write_text(f"killed at step {step}\n")
        os.kill(os.getpid(), signal.SIGKILL)
