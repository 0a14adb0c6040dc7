"""What a person watching a training run sees: a progress bar on a terminal, plain lines in a log.

On a terminal (``trainer.enable_progress_bar: auto`` and stdout a TTY) Lightning's bar shows progress,
counted in optimizer steps (:class:`StepProgressBar`).
Elsewhere -- a SLURM log, ``nohup``, a pipe -- a bar is unreadable, so :class:`ProgressLog` prints one
line every ``trainer.log_every_n_steps`` optimizer steps (and at the last)::

    [train] step 40/200 (20%) | loss 1.9312 | 5,310 tok/s | elapsed 0:01:02 | ETA 0:04:08

The loss is the one the module logs (``train/loss`` in ``trainer.callback_metrics``, read after the
module's own ``on_train_batch_end`` has logged it: the line for step N is printed at the start of the
next batch or at the end of training). Tokens per second count the input tokens of this rank's batches
(non-padding where an attention mask says so) times the world size, since the launch started, so the
rate and the ETA describe this launch, resumed or not. Checkpoint evaluations are printed by the
checkpoint-eval callback as they arrive (:func:`ifdistill.callbacks.eval_logging.evaluation_line`).

:func:`single_log_output` removes the second copy of every Lightning INFO line: ``import lightning``
adds its own console handler to the ``lightning`` logger, and under Hydra the root logger (Hydra's
handler) prints the same record again.
"""

from __future__ import annotations

import datetime as _dt
import logging
import sys
import time
from typing import Any, Optional

from lightning.pytorch import Callback
from lightning.pytorch.callbacks import TQDMProgressBar

LOSS_KEYS = ("train/loss", "train_loss", "loss")


def single_log_output() -> None:
    """Drop ``lightning``'s own console handler when the root logger already prints (Hydra's config)."""
    import lightning  # noqa: F401  (its import adds the handler this removes)

    if not logging.getLogger().handlers:
        return  # no root handler (a plain script): Lightning's handler is the only output; keep it
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        lg = logging.getLogger(name)
        for handler in list(lg.handlers):
            if type(handler) is logging.StreamHandler:  # console handlers (a FileHandler is a subclass)
                lg.removeHandler(handler)
        lg.propagate = True


class StepProgressBar(TQDMProgressBar):
    """Lightning's bar, counted in the run's optimizer steps ("train steps 40/150", with its ETA) instead
    of the batches of an epoch: ifdistill trains for ``trainer.max_steps`` on an endless sampler, where an
    epoch counter means nothing."""

    def on_train_epoch_start(self, trainer, *args: Any) -> None:
        super().on_train_epoch_start(trainer, *args)
        bar = self.train_progress_bar
        bar.reset(total=int(trainer.max_steps))
        bar.initial = bar.n = int(trainer.global_step)  # a resumed run starts where it stopped
        bar.set_description("train steps")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        bar = self.train_progress_bar
        if bar is not None and not bar.disable and bar.n != trainer.global_step:
            bar.n = int(trainer.global_step)
            shown = {k: v for k, v in self.get_metrics(trainer, pl_module).items() if k != "v_num"}
            loss = next((trainer.callback_metrics[k] for k in LOSS_KEYS if k in trainer.callback_metrics), None)
            if loss is not None:
                shown["loss"] = f"{float(loss):.4f}"
            bar.set_postfix(shown, refresh=False)
            bar.refresh()


def want_progress_bar(setting: Any) -> bool:
    """``trainer.enable_progress_bar``: ``auto`` means a bar exactly when stdout is a terminal."""
    if str(setting).lower() == "auto":
        return sys.stdout.isatty()
    return bool(setting)


def _duration(seconds: float) -> str:
    return str(_dt.timedelta(seconds=int(max(0.0, seconds))))


def _batch_tokens(batch: Any) -> int:
    if not isinstance(batch, dict) or "input_ids" not in batch:
        return 0
    mask = batch.get("attention_mask")
    if mask is not None and getattr(mask, "dim", lambda: 0)() == 2:
        return int(mask.sum())
    return int(batch["input_ids"].numel())


class ProgressLog(Callback):
    """One line per ``every_n_steps`` optimizer steps on global rank 0 (see the module docstring)."""

    def __init__(self, every_n_steps: int, stream: Any = None):
        super().__init__()
        self.every_n_steps = max(1, int(every_n_steps))
        self.stream = stream
        self._start: Optional[float] = None
        self._start_step = 0
        self._tokens = 0
        self._due: Optional[int] = None
        self._printed = -1

    def on_train_start(self, trainer, pl_module) -> None:
        self._start, self._start_step, self._tokens = time.perf_counter(), trainer.global_step, 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._flush(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._tokens += _batch_tokens(batch)
        step = trainer.global_step
        if step > max(self._printed, self._start_step) and (step % self.every_n_steps == 0 or step == trainer.max_steps):
            self._due = step  # printed once the module's metrics of this step are in callback_metrics

    def on_train_end(self, trainer, pl_module) -> None:
        self._flush(trainer)

    def line(self, trainer, step: int) -> str:
        total = int(trainer.max_steps)
        elapsed = time.perf_counter() - (self._start or time.perf_counter())
        done = step - self._start_step
        parts = [f"[train] step {step}/{total} ({100 * step / max(total, 1):.0f}%)"]
        loss = next((trainer.callback_metrics[k] for k in LOSS_KEYS if k in trainer.callback_metrics), None)
        if loss is not None:
            parts.append(f"loss {float(loss):.4f}")
        if elapsed > 0 and self._tokens:
            parts.append(f"{self._tokens * trainer.world_size / elapsed:,.0f} tok/s")
        parts.append(f"elapsed {_duration(elapsed)}")
        if done > 0 and step < total:
            parts.append(f"ETA {_duration(elapsed / done * (total - step))}")
        return " | ".join(parts)

    def _flush(self, trainer) -> None:
        if self._due is None or not trainer.is_global_zero:
            self._due = None
            return
        step, self._due = self._due, None
        self._printed = step
        print(self.line(trainer, step), file=self.stream or sys.stdout, flush=True)
