"""The non-finite guard: a non-finite loss, gradient or weight on any rank stops the run (or skips the step) at once.

A run whose loss turned to NaN must not end as ``finished``, keep checkpoints of NaN weights or have them
exported and scored. :class:`NonFiniteGuard` checks, on every optimizer step and on every rank:

- the loss of each micro-batch (``on_before_backward``) and every local gradient
  (``on_before_optimizer_step``, before clipping and before the optimizer applies them);
- the trainable weights after the step (``on_train_batch_end`` at the step boundary, before the
  checkpoint is written -- Lightning runs ``ModelCheckpoint`` callbacks last -- and before the
  checkpoint-eval callback exports: training puts this guard first in the callback list). A step with
  finite gradients can still overflow the weights (a huge learning rate).

The ranks agree through one all-reduce of a flag per check (a sum of per-quantity flags, so every rank
names the same quantity); under FSDP2 each rank checks its shards, under DeepSpeed ZeRO the gradients
live in DeepSpeed's partitions (``param.grad`` is empty), so there the loss and the weights are checked.
The checks read each tensor once (its float64 sum: finite exactly when every element is, since no
float32 or bfloat16 values can overflow a float64 sum), less than the optimizer's own passes.

Without a host synchronisation per step. Deciding on the host whether a step is finite makes the CPU
wait for the GPU every step, so it can no longer queue the next step's kernels while the GPU runs this
one. Where the optimizer is torch's *fused* Adam/AdamW (the default on CUDA), the decision stays on the
device: the flags go to the optimizer as ``found_inf`` (the hook ``GradScaler`` uses), and the fused
kernel skips the whole update of a non-finite step -- weights, moments, weight decay and step count.
The flags of each step are kept on the device and read (one synchronisation) at the *read steps*: every
``trainer.log_every_n_steps``-th step, the step cadences of the other callbacks (``every_n_steps``:
checkpoint evaluation; checkpoint saving), the last step, before validation and before any checkpoint
is saved. The read handles each step in order as the synchronous check would -- skip records, the
``stop`` or past-the-bound error naming the first offending step and quantity -- so a non-finite step is
never applied and nothing reads weights that were not checked; a stopped run computes (and discards)
at most the steps up to the next read step. Other optimizers (SGD, DeepSpeed's, non-fused AdamW: the
CPU default) and FSDP2's sharded parameters are checked synchronously at every step.

Policy ``run.on_nonfinite``:

- ``stop`` (default): the step's gradients are dropped, so the optimizer does not apply them, and
  :class:`TrainingDiverged` ends the fit. ``train()`` records the state ``diverged`` in ``run.json``,
  ``metrics.json`` and W&B (:func:`record_divergence`); ``ifdistill-train`` prints its one line and
  exits with :data:`EXIT_DIVERGED`. The checkpoints on disk are the ones written before (all of them
  passed the weight check), nothing after is exported or evaluated.
- ``skip``: the step's gradients are dropped (``param.grad = None``: torch optimizers leave such a
  parameter, its moments and its weight decay untouched), the step is counted and recorded in
  ``metrics.json`` (``nonfinite_skipped``); after ``run.max_skipped_steps`` skipped steps (counted per
  launch) the next one
  stops as ``stop`` does. Non-finite weights cannot be skipped (the step is applied already): they
  always stop. Not offered under DeepSpeed, whose optimizer steps from its own gradient partitions
  (preflight refuses the combination).

Resuming: the same command resumes from the last finite checkpoint and diverges again; a changed
learning rate is a new config hash and so a new run directory, which starts from the diverged run's
last checkpoint with ``run.resume_from=<run dir>`` (:func:`ifdistill.train.run.train`), optimizer
moments, data order and step included, with the new learning rate (:class:`ConfiguredLearningRate`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

import torch
from lightning.pytorch import Callback

from ifdistill.results import run_metrics
from ifdistill.runs.rundir import RunDir, RunInfo, now_iso

log = logging.getLogger(__name__)

POLICIES = ("stop", "skip")
EXIT_DIVERGED = 3  # ifdistill-train's exit code for a diverged run (2: bad input, 1: a crash)
QUANTITIES = ("loss", "gradient", "weights")  # the order of the all-reduced flags


class TrainingDiverged(Exception):
    """A non-finite ``quantity`` at optimizer ``step``; ``str()`` is the one line ``ifdistill-train`` prints."""

    def __init__(self, step: int, quantity: str, *, policy: str, skipped: int = 0, run_dir: Optional[Path] = None,
                 checkpoint: Optional[Path] = None):
        self.step, self.quantity, self.policy, self.skipped = int(step), quantity, policy, int(skipped)
        self.run_dir, self.checkpoint = run_dir, checkpoint
        what = {"loss": "loss", "gradient": "gradient norm", "weights": "weights after the update"}[quantity]
        why = f"run.on_nonfinite={policy}" + (f", {skipped} steps skipped already" if policy == "skip" else "")
        kept = f"the last finite checkpoint is {checkpoint}" if checkpoint else "no checkpoint was written before it"
        hint = (f"; to continue from it with a smaller learning rate re-run with optim.lr=<smaller> "
                f"run.resume_from={run_dir} (a new config hash, so a new run directory)") if checkpoint else ""
        super().__init__(f"training diverged: non-finite {what} at optimizer step {step} ({why}); {kept}{hint}")

    def record(self) -> dict[str, Any]:
        return {"step": self.step, "quantity": self.quantity, "policy": self.policy, "skipped": self.skipped,
                "checkpoint": str(self.checkpoint) if self.checkpoint else None, "time": now_iso()}


def finite_flag(tensors: Iterable[torch.Tensor]) -> Optional[torch.Tensor]:
    """A 0-d bool tensor on the tensors' device: every element of every tensor is finite (a DTensor by its
    local shard); ``None`` for no tensors. No synchronisation: the decision stays on the device."""
    local = [_local(t) for t in tensors]
    if not local:
        return None
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in local:
        by_dtype.setdefault(t.dtype, []).append(t)
    # the largest magnitude of each tensor (never overflows; NaN stays NaN), a few multi-tensor kernels per dtype
    # instead of one reduction per parameter
    flags = [torch.isfinite(torch.stack(torch._foreach_norm(group, math.inf))).all() for group in by_dtype.values()]
    return flags[0] if len(flags) == 1 else torch.stack(flags).all()


def all_finite(tensors: Iterable[torch.Tensor]) -> bool:
    """Whether every element of every tensor is finite (:func:`finite_flag` read on the host: one sync)."""
    flag = finite_flag(tensors)
    return True if flag is None else bool(flag)


def skips_on_device(optimizer: Any) -> bool:
    """Whether ``optimizer.step`` honours ``found_inf`` (torch's fused Adam/AdamW; module docstring). Not for
    sharded (DTensor) parameters: FSDP2's are checked synchronously, a plain ``found_inf`` beside them untried."""
    if not (isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)) and optimizer.defaults.get("fused")):
        return False
    return not any(hasattr(p, "to_local") for g in optimizer.param_groups for p in g["params"])


def _cadences(trainer) -> set[int]:
    """The step cadences at which something reads the logs, the weights or the checkpoints."""
    out = {max(1, int(trainer.log_every_n_steps))}
    for cb in trainer.callbacks:
        for attr in ("every_n_steps", "_every_n_train_steps"):
            v = getattr(cb, attr, None)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                out.add(v)
    return out


def _local(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return t.to_local() if hasattr(t, "to_local") else t


def _weights(pl_module) -> list[torch.Tensor]:
    """The trainable parameters as this rank holds them (a ZeRO-3 parameter by its partition)."""
    out = []
    for p in pl_module.parameters():
        if p.requires_grad:
            part = getattr(p, "ds_tensor", None)
            out.append(part if part is not None else p)
    return [t for t in out if t.numel() > 0]


def last_finite_checkpoint(rd: RunDir) -> Optional[Path]:
    """Where a diverged run can be continued from: its newest complete checkpoint, or, when it wrote none,
    the checkpoint its last launch started from (``resumed_from`` in run.json: another run's, through
    ``run.resume_from``). Every checkpoint a guarded run writes passed the weight check."""
    from ifdistill.train.checkpointing import find_resume_checkpoint, is_complete

    own = find_resume_checkpoint(rd.checkpoints)
    if own is not None:
        return own
    launches = (rd.read_meta() or {}).get("launches") or [{}]
    origin = launches[-1].get("resumed_from")
    return Path(origin) if origin and is_complete(origin) else None


class NonFiniteGuard(Callback):
    """Act on a non-finite loss, gradient or weight with ``policy`` (module docstring)."""

    def __init__(self, policy: str = "stop", max_skipped_steps: int = 10, run: Optional[RunInfo] = None):
        if policy not in POLICIES:
            raise ValueError(f"run.on_nonfinite must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.policy, self.max_skipped = policy, int(max_skipped_steps)
        self.run = run
        self.skipped: list[dict[str, Any]] = []
        self._loss_finite: list[torch.Tensor] = []  # per micro-batch of the step; read once, at its end
        self._seen_step = -1
        self._pending: list[tuple[int, torch.Tensor]] = []  # (step, all-reduced flags) not read yet
        self._read_every: set[int] = {1}
        self.reads = 0  # host reads of the device flags (one synchronisation each)

    # -- checks ---------------------------------------------------------------------------------
    def on_train_start(self, trainer, pl_module) -> None:
        self._seen_step = trainer.global_step
        self._read_every = _cadences(trainer)

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        self._loss_finite.append(torch.isfinite(loss.detach()).all())

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        loss_ok = torch.stack(self._loss_finite).all() if self._loss_finite else None
        self._loss_finite = []
        flags = self._flags(trainer, loss=loss_ok, gradient=finite_flag(grads))
        if skips_on_device(optimizer):  # the fused kernel skips the update where found_inf != 0
            optimizer.found_inf = (flags[:2].sum() > 0).to(torch.float32)
            self._pending.append((trainer.global_step + 1, flags))
            return
        bad = self._first_bad(flags.tolist())
        if bad is None:
            return
        for group in optimizer.param_groups:  # the optimizer leaves a parameter without a gradient alone
            for p in group["params"]:
                p.grad = None
        step = trainer.global_step + 1
        if self.policy == "skip" and len(self.skipped) < self.max_skipped:
            self._skip(trainer, step, bad)
            return
        raise self._diverged(trainer, step, bad)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self._seen_step:  # inside an accumulation window
            return
        self._seen_step = step = trainer.global_step
        weights = self._flags(trainer, weights=finite_flag(_weights(pl_module)))
        if self._pending and self._pending[-1][0] == step:  # deferred: this step's flags, read at a read step
            self._pending[-1] = (step, self._pending[-1][1] + weights)
            if step >= trainer.max_steps > 0 or any(step % n == 0 for n in self._read_every):
                self.read(trainer)
            return
        if self._first_bad(weights.tolist()) is not None:
            raise self._diverged(trainer, step, "weights")

    def on_validation_start(self, trainer, pl_module) -> None:
        self.read(trainer)

    def on_train_end(self, trainer, pl_module) -> None:
        self.read(trainer)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.read(trainer)  # raising here leaves the checkpoint unwritten

    def read(self, trainer) -> None:
        """Read the deferred flags (one synchronisation) and act on each step in order (module docstring)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        self.reads += 1
        for (step, _), values in zip(pending, torch.stack([f for _, f in pending]).tolist()):
            bad = self._first_bad(values)
            if bad == "weights" or (bad is not None and (self.policy != "skip" or len(self.skipped) >= self.max_skipped)):
                raise self._diverged(trainer, step, bad)
            if bad is not None:
                self._skip(trainer, step, bad)

    # -- internals ------------------------------------------------------------------------------
    @staticmethod
    def _flags(trainer, **finite: Optional[torch.Tensor]) -> torch.Tensor:
        """Per-quantity non-finite counts over ranks (one all-reduce, no synchronisation) as a device tensor."""
        device = trainer.strategy.root_device
        flags = torch.stack([(~finite[q]).to(device, torch.float32) if finite.get(q) is not None
                             else torch.zeros((), device=device) for q in QUANTITIES])
        return trainer.strategy.reduce(flags, reduce_op="sum") if trainer.world_size > 1 else flags

    @staticmethod
    def _first_bad(values: list[float]) -> Optional[str]:
        """The first quantity non-finite on any rank, or None."""
        return next((q for q, f in zip(QUANTITIES, values) if f > 0), None)

    def _skip(self, trainer, step: int, quantity: str) -> None:
        entry = {"step": step, "quantity": quantity}
        self.skipped.append(entry)
        if trainer.is_global_zero:
            print(f"[divergence] non-finite {quantity} at optimizer step {step}: step skipped "
                  f"({len(self.skipped)} of at most {self.max_skipped}, run.on_nonfinite=skip)", flush=True)
            if self.run is not None:
                run_metrics.update(self.run.dir.root,
                                   lambda d: d.setdefault("nonfinite_skipped", []).append(entry))

    def _diverged(self, trainer, step: int, quantity: str) -> TrainingDiverged:
        rd = self.run.dir if self.run is not None else None
        ckpt = last_finite_checkpoint(rd) if rd is not None else None
        return TrainingDiverged(step, quantity, policy=self.policy, skipped=len(self.skipped),
                                run_dir=rd.root if rd is not None else None, checkpoint=ckpt)


class ConfiguredLearningRate(Callback):
    """A run started from another run's checkpoint (``run.resume_from``) trains with *its own* learning
    rate: Lightning restores the optimizer's and the scheduler's state, learning rate included, so the
    configured one is put back (scheduler base and current value at the restored step) before training."""

    def on_train_start(self, trainer, pl_module) -> None:
        lr = float((getattr(pl_module, "optim_cfg", None) or {}).get("lr", math.nan))
        if math.isnan(lr):
            return
        for config in trainer.lr_scheduler_configs:
            sched = config.scheduler
            groups = sched.optimizer.param_groups
            sched.base_lrs = [lr] * len(groups)
            lambdas = getattr(sched, "lr_lambdas", [lambda _: 1.0] * len(groups))
            for group, factor in zip(groups, lambdas):
                group["initial_lr"], group["lr"] = lr, lr * factor(sched.last_epoch)
        if not trainer.lr_scheduler_configs:
            for opt in trainer.optimizers:
                for group in opt.param_groups:
                    group["lr"] = lr
        if trainer.is_global_zero:
            log.info("learning rate %g (this run's optim.lr) replaces the resumed checkpoint's", lr)


def record_divergence(rd: RunDir, stop: TrainingDiverged, loggers: Iterable[Any] = ()) -> None:
    """State ``diverged`` in run.json, metrics.json and each W&B logger's summary (rank 0), W&B closed with
    :data:`EXIT_DIVERGED`."""
    rd.mark_diverged(stop.record())
    run_metrics.update(rd.root, lambda d: d.update(state="diverged", divergence=stop.record()))
    for lg in loggers:
        run = getattr(lg, "_experiment", None)
        if run is None or not hasattr(run, "summary"):
            continue
        run.summary.update({"run/state": "diverged", "run/diverged_step": stop.step,
                            "run/diverged_quantity": stop.quantity})
        run.finish(exit_code=EXIT_DIVERGED)
