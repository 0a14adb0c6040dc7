"""SFT as a LightningModule: completion-only loss, token-weighted metrics, exact gradient accumulation.

Loss normalisation. The objective of one optimizer step is ``sum of per-token losses / T`` where ``T``
is the number of supervised tokens in the *whole* step: every micro-batch of the accumulation window
on every rank. A per-micro-batch mean (what ``loss.mean()`` and most trainers do) weights a short
completion like a long one and makes "2 x 4 accumulated" differ from "batch 8". The datamodule puts
this rank's window total in ``batch["step_tokens"]``; the module sums it over ranks, and returns a
*backward loss* scaled so that, after the strategy averages gradients over ranks and Lightning divides
by ``accumulate_grad_batches`` (DeepSpeed divides once more, see :meth:`_backward_scale`), the
gradient is exactly that of the step objective. Logged values are the real token means. A method that
counts its tokens only after sampling (``normalise_after_backward``, :mod:`ifdistill.train.method`)
returns the unnormalised sum instead and the summed gradients are divided by the step's token count,
all ranks, in :meth:`on_before_optimizer_step`.

Randomness. Before every training micro-batch the global RNG is re-seeded from ``(seed, global step,
micro-batch, rank)``. Dropout masks are then a function of where training is, not of how it got
there: a run resumed from a checkpoint draws the same masks as an uninterrupted one, whatever the
validation loops, dataloader iterators or checkpoint code consumed in between.

Metrics (teacher-forced, over supervised tokens only, shift applied once): ``ce`` (nats), ``acc``
(top-1) and ``entropy`` for the training stream (``train/*``, aggregated over the logging interval)
and for each held-out set (``val/<name>/*``, aggregated over the whole set). See
:mod:`ifdistill.train.token_sums` for why these are sums over tokens.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Optional

import lightning.pytorch as pl
import numpy as np
import torch

from ifdistill.train import drift, kernels
from ifdistill.train.chunked_head import (ChunkObjective, Head, call_as_forward, chunked_head_objective, chunked_sums,
                                          head_tensors, unchunkable)
from ifdistill.train.losses import ce_kd_with_stats, supervised_positions, token_stats
from ifdistill.methods.sft.hooks import SFTHooks
from ifdistill.methods.sft.settings import SFTSettings
from ifdistill.train.method import TrainingInputs
from ifdistill.train.modeling import SelectiveLM, build_model, decoder_layers
from ifdistill.train.token_sums import TokenSums, ratio, token_metrics

# Validation values are reduced over ranks (as token sums) before they are logged, so Lightning's advice
# to add sync_dist=True (a mean over ranks of identical values) does not apply.
warnings.filterwarnings("ignore", message=r".*sync_dist=True.*when logging on epoch level")

STAT_KEYS = ("nll", "correct", "entropy", "count")
DATA_KEYS = ("examples", "replay_examples", "replay_tokens", "input_tokens")
UNCHUNKED_WARNING = "logit_chunk_size is set but the objective runs unchunked"


def step_seed(seed: int, step: int, micro: int, rank: int) -> int:
    """A well-mixed 63-bit seed for one micro-batch (numpy's SeedSequence hashing)."""
    return int(np.random.SeedSequence([seed, step, micro, rank]).generate_state(1, np.uint64)[0] >> 1)


def lr_lambda(schedule: str, warmup_steps: int, max_steps: int, min_lr_ratio: float = 0.0):
    """Multiplier of the base LR at an optimizer step: linear warmup, then constant/linear/cosine decay."""
    if schedule not in ("constant", "linear", "cosine"):
        raise ValueError(f"optim.schedule must be constant, linear or cosine, got {schedule!r}")

    def f(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant" or max_steps <= warmup_steps:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
        decay = 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return min_lr_ratio + (1.0 - min_lr_ratio) * decay

    return f


class SFTModule(SFTHooks, pl.LightningModule):
    """Supervised fine-tuning on the supervised (completion) tokens of chat examples.

    Args:
        inputs: what training supplies from outside the ``method`` section: the model, peft and optim
            sections, the seed, the held-out sets' names, dtype, logit chunking, ... (their meaning:
            :class:`~ifdistill.train.method.TrainingInputs`).
        settings: the method's own settings, its ``method`` section as an object
            (:attr:`settings_class`; a method subclass takes its own class, which extends SFT's).
    """

    def __init__(self, inputs: TrainingInputs, settings: Optional[SFTSettings] = None):
        super().__init__()
        self.inputs = inputs
        self.settings = settings if settings is not None else self.settings_class()
        self.save_hyperparameters(self.hyperparameters(), logger=False)  # the run's config reaches the loggers
        self.optim_cfg = dict(inputs.optim or {})
        ks = kernels.settings(inputs.kernels)
        self.lm = SelectiveLM(build_model(inputs.model, inputs.peft, dtype=inputs.dtype,
                                          gradient_checkpointing=inputs.gradient_checkpointing,
                                          attn_implementation=inputs.attn_implementation,
                                          liger=kernels.want_liger(kernels.choice(ks.liger, "liger"))))
        # the decoder layers compiled (ifdistill.train.kernels), before any copy of the model is taken
        self.compile_layers = kernels.choice(ks.compile, "compile")
        self.compile_options = kernels.compile_options(ks.dynamic, ks.compile_mode, ks.compile_backend)
        kernels.compile_layers(decoder_layers(self.model), self.compile_layers, self.compile_options)
        loss = kernels.choice(ks.compile_loss, "compile_loss")
        self.compile_loss = self.compile_layers if loss == kernels.AUTO else loss
        self.val_names = list(inputs.val_names)
        self.train_sums = TokenSums(self._train_keys())
        # -- drift from the base (ifdistill.train.drift): its sums, its reference from setup() --
        self.drift: Optional[drift.BaseReference] = None
        val_keys = STAT_KEYS + (drift.DRIFT_KEYS if inputs.drift_from_base else ())
        self.val_sums = {name: TokenSums(val_keys) for name in self.val_names}
        self._fsdp_applied = False
        self._last_log: Optional[tuple[float, int]] = None
        self.logit_chunk_size = int(inputs.logit_chunk_size) if inputs.logit_chunk_size else None
        self._warned_unchunked = False
        self._window_tokens: Optional[torch.Tensor] = None  # normalise_after_backward: this step's tokens so far

    # -- structure --------------------------------------------------------------------------------
    def hyperparameters(self) -> dict[str, Any]:
        """What a checkpoint records of the module's construction (``hyper_parameters``), as plain data."""
        return {"inputs": dataclasses.asdict(self.inputs), "settings": dataclasses.asdict(self.settings)}

    @property
    def model(self) -> torch.nn.Module:
        """The Hugging Face (or PEFT) model being trained, e.g. for ``save_pretrained``."""
        return self.lm.model

    def _train_keys(self) -> tuple[str, ...]:
        return STAT_KEYS + DATA_KEYS + ("loss",)

    def configure_model(self) -> None:
        """FSDP2 (ModelParallelStrategy): shard every decoder layer, then the root :class:`SelectiveLM`."""
        trainer = self._trainer
        if trainer is None or self._fsdp_applied:
            return
        from lightning.pytorch.strategies import ModelParallelStrategy

        if not isinstance(trainer.strategy, ModelParallelStrategy):
            return
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = self.device_mesh["data_parallel"]
        mp = MixedPrecisionPolicy()
        if trainer.precision in ("bf16-mixed", "bf16-true"):
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in decoder_layers(self.model):
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(self.lm, mesh=mesh, mp_policy=mp)
        self._fsdp_applied = True

    def setup(self, stage: str) -> None:
        """Compiled layers checked against the strategy (:func:`ifdistill.train.kernels.check_strategy`); the
        drift's base, before Lightning restores a checkpoint (:mod:`ifdistill.train.drift`)."""
        if self._trainer is not None:
            kernels.check_strategy(self.trainer.strategy, self.trainer.world_size, self.compile_layers,
                                   decoder_layers(self.model))
        if self.inputs.drift_from_base and self.drift is None:
            self.drift = drift.BaseReference.of(self)

    # -- distributed helpers ----------------------------------------------------------------------
    def _sum_over_ranks(self, t: torch.Tensor) -> torch.Tensor:
        trainer = self._trainer
        if trainer is None or trainer.world_size <= 1:
            return t
        return trainer.strategy.reduce(t, reduce_op="sum")

    def _backward_scale(self) -> float:
        """Undo the strategy's gradient averaging and the accumulation divisions (module docstring)."""
        trainer = self._trainer
        if trainer is None:
            return 1.0
        accumulate = trainer.accumulate_grad_batches
        scale = float(trainer.world_size * accumulate)
        if getattr(trainer.strategy, "handles_gradient_accumulation", False):
            scale *= accumulate  # DeepSpeed's engine.backward divides by its accumulation steps as well
        return scale

    def _reseed(self, batch_idx: int) -> None:
        trainer = self._trainer
        step = trainer.global_step if trainer is not None else 0
        accumulate = trainer.accumulate_grad_batches if trainer is not None else 1
        rank = trainer.global_rank if trainer is not None else 0
        torch.manual_seed(step_seed(int(self.inputs.seed), step, batch_idx % accumulate, rank))

    # -- forward ----------------------------------------------------------------------------------
    @staticmethod
    def supervised(batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``rows``, ``cols`` of the positions that predict supervised tokens, and the ``(N,)`` targets.

        The collator's ``supervised_rows``/``supervised_cols`` when present: found on the host, so the
        device does not have to count them (a ``nonzero`` on the GPU waits for all queued work)."""
        labels = batch["labels"]
        if "supervised_rows" in batch:
            rows, cols = batch["supervised_rows"], batch["supervised_cols"]
        else:
            rows, cols = supervised_positions(labels)
        return rows, cols, labels[rows, cols + 1]

    def student(self, batch: Mapping[str, torch.Tensor], rows: torch.Tensor, cols: torch.Tensor, head: Any) -> Any:
        """The student network on ``batch`` up to positions ``(rows, cols)``, then ``head``
        (:class:`SelectiveLM`'s argument: logits, hidden states, or a function of both)."""
        return self.lm(batch["input_ids"], rows, cols, attention_mask=batch.get("attention_mask"),
                       position_ids=batch.get("position_ids"), cu_seqlens=batch.get("cu_seqlens"),
                       max_seqlen=batch.get("max_seqlen"), head=head)

    def objective(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Sum (not mean) of the per-token loss of one micro-batch, and the sums to log."""
        rows, cols, targets = self.supervised(batch)
        return self.head_objective(lambda head: self.student(batch, rows, cols, head),
                                   targets, lambda s, y, t: ce_kd_with_stats(s, y))  # one softmax for loss and metrics

    def head_objective(self, student: Callable[[Any], Any], targets: torch.Tensor, loss_fn: ChunkObjective,
                       teacher: Optional[Callable[[bool], torch.Tensor]] = None,
                       teacher_head: Optional[Callable[[Head], Head]] = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``loss_fn(student logits, targets, teacher logits)``, chunked through the LM head when configured.

        ``student(head)``/``teacher(head)`` run the network up to the supervised positions with
        :class:`SelectiveLM`'s ``head`` argument: ``True`` returns logits, ``False`` hidden states, a
        function is applied to the hidden states and the head module inside the forward. The teacher
        runs first, so that its gathered parameters and activations are freed before the student's graph
        is built. ``teacher_head`` maps the student's head tensors to the teacher's (default: the same).
        """
        loss_fn = kernels.compiled_objective(loss_fn, self.compile_loss, self.device, self.compile_options)
        if not self.logit_chunk_size or self._unchunked(self.lm.output_head()):
            t_logits = teacher(True) if teacher is not None else None
            return loss_fn(student(True), targets, t_logits)
        t_hidden = teacher(False) if teacher is not None else None

        def chunked(hidden: torch.Tensor, head: torch.nn.Module):
            def forward(h: torch.Tensor):
                tensors = head_tensors(head)
                return chunked_head_objective(h, tensors, targets, loss_fn, chunk_size=self.logit_chunk_size,
                                              teacher_hidden=t_hidden,
                                              teacher_head=teacher_head(tensors) if teacher_head else None)
            return call_as_forward(head, forward, hidden)

        return student(chunked)

    def _unchunked(self, head: torch.nn.Module) -> bool:
        """Whether the configured chunking cannot apply to ``head``; says why once per module."""
        reason = unchunkable(head)
        if reason is not None and not self._warned_unchunked:
            warnings.warn(f"{UNCHUNKED_WARNING}: {reason}")
            self._warned_unchunked = True
        return reason is not None

    # -- training ---------------------------------------------------------------------------------
    def _step_tokens(self, batch: Mapping[str, torch.Tensor], local_count: torch.Tensor) -> torch.Tensor:
        """Supervised tokens in the whole optimizer step, all ranks (falls back to this micro-batch x accumulate)."""
        local = batch.get("step_tokens")
        if local is None:
            accumulate = self._trainer.accumulate_grad_batches if self._trainer is not None else 1
            local = local_count * accumulate
        local = torch.as_tensor(local, dtype=torch.float64, device=local_count.device).reshape(())
        return self._sum_over_ranks(local.clone())

    def training_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self._reseed(batch_idx)
        loss_sum, stats = self.objective(batch)
        self.train_sums.add(stats)
        self.train_sums.add({"loss": loss_sum.detach()})
        self.train_sums.add(self._data_sums(batch))
        if self.normalise_after_backward:  # the step's tokens are known after its last micro-batch
            count = stats["count"].detach().to(torch.float64)
            self._window_tokens = count if self._window_tokens is None else self._window_tokens + count
            return loss_sum * self._backward_scale()
        total = self._step_tokens(batch, stats["count"])
        return loss_sum * (self._backward_scale() / total.clamp(min=1).to(loss_sum.dtype))

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """``normalise_after_backward``: divide the step's summed gradients by its tokens, all ranks
        (:mod:`ifdistill.train.method`); before clipping, which Lightning applies after this hook."""
        if not self.normalise_after_backward or self._window_tokens is None:
            return
        total = float(self._sum_over_ranks(self._window_tokens.clone()).clamp(min=1))
        self._window_tokens = None
        for p in self.lm.parameters():
            if p.grad is not None:
                p.grad.div_(total)

    def _data_sums(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor | float]:
        """Device tensors and host numbers only: nothing here waits for the device (no boolean indexing)."""
        labels = batch["labels"]
        if "attention_mask" in batch:
            real = batch["attention_mask"].sum()
        elif "seq_idx" in batch:  # packed rows: -1 marks the row padding
            real = (batch["seq_idx"] >= 0).sum()
        else:
            real = float(labels.numel())
        out: dict[str, torch.Tensor | float] = {"input_tokens": real}
        if "is_replay" in batch and "num_supervised" in batch:
            rep = batch["is_replay"].bool()
            out.update(examples=float(rep.numel()), replay_examples=rep.sum(),
                       replay_tokens=(batch["num_supervised"] * rep).sum())
        else:
            out.update(examples=float(labels.shape[0]), replay_examples=0.0, replay_tokens=0.0)
        return out

    def on_train_start(self) -> None:
        if self.inputs.validate_at_start and self.trainer.global_step == 0 and self.val_names:
            self._validate_now()
        self.lm.train()  # from_pretrained models start in eval mode (dropout off)
        self._last_log = (time.perf_counter(), self.trainer.global_step)

    @torch.no_grad()
    def _validate_now(self) -> None:
        """Held-out metrics of the initial model, logged at step 0 (Lightning validates only after steps)."""
        dm = self.trainer.datamodule
        loaders = dm.val_dataloader() if dm is not None else []
        was = self.lm.training
        self.lm.train(False)
        for idx, loader in enumerate(loaders):
            for batch in loader:
                batch = {k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                self.validation_step(batch, 0, idx)
        self.lm.train(was)
        values: dict[str, float] = {}
        for name in self.val_names:
            sums = self.val_sums[name].reduce(self._sum_over_ranks, device=self.device)
            values.update({f"val/{name}/{k}": v for k, v in drift.held_out_metrics(sums).items()})
        if self.trainer.is_global_zero:
            for logger in self.loggers:
                logger.log_metrics(values, step=0)
        self.initial_val_metrics = values

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        trainer = self.trainer
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return  # mid accumulation window: the optimizer has not stepped
        step = trainer.global_step
        every = max(1, int(trainer.log_every_n_steps))
        # Reduce (one all-reduce) at the end of each logging interval and at the last step; the sums
        # keep accumulating over the interval in between.
        if step % every and step != trainer.max_steps:
            return
        sums = self.train_sums.reduce(self._sum_over_ranks, device=self.device)
        values = self.train_metrics(sums)
        self.log_dict(values, on_step=True, on_epoch=False, sync_dist=False)
        if step % every and trainer.is_global_zero:
            # Lightning hands logged values to the loggers only on multiples of log_every_n_steps; the
            # last, partial interval would be reduced and then lost, so it goes to the loggers here, at
            # Lightning's step convention (its count of batches that stepped before this one).
            for logger in self.loggers:
                logger.log_metrics(values, step=trainer.fit_loop.epoch_loop._batches_that_stepped)

    def train_metrics(self, sums: Mapping[str, float]) -> dict[str, float]:
        out = {f"train/{k}": v for k, v in token_metrics(sums).items()}
        out["train/loss"] = ratio(sums, "loss", "count")
        out["data/replay_share_examples"] = ratio(sums, "replay_examples", "examples")
        out["data/replay_share_tokens"] = ratio(sums, "replay_tokens", "count")
        out["train/lr"] = self.trainer.optimizers[0].param_groups[0]["lr"] if self.trainer.optimizers else float("nan")
        now, step = time.perf_counter(), self.trainer.global_step
        if self._last_log is not None and step > self._last_log[1]:
            out["perf/tokens_per_s"] = sums["input_tokens"] / max(now - self._last_log[0], 1e-9)
            out["perf/step_time_s"] = (now - self._last_log[0]) / (step - self._last_log[1])
        self._last_log = (now, step)
        return out

    # -- validation -------------------------------------------------------------------------------
    def validation_step(self, batch: Mapping[str, torch.Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Held-out sums, the LM head applied ``logit_chunk_size`` positions at a time as in training."""
        rows, cols, targets = self.supervised(batch)
        if self.drift is not None:  # the same sums and the drift from the base, in one pass over the head
            sums = self.drift.validation_sums(self, batch, rows, cols, targets, self.logit_chunk_size)
        else:
            sums = self.student(batch, rows, cols, lambda hidden, head: chunked_sums(
                hidden, head, targets, token_stats, chunk_size=self.logit_chunk_size))
        self.val_sums[self.val_names[dataloader_idx]].add(sums)

    def on_validation_epoch_end(self) -> None:
        for name in self.val_names:
            sums = self.val_sums[name].reduce(self._sum_over_ranks, device=self.device)
            values = {f"val/{name}/{k}": v for k, v in drift.held_out_metrics(sums).items()}
            self.log_dict(values, on_step=False, on_epoch=True, sync_dist=False)

    # -- optimisation -----------------------------------------------------------------------------
    def configure_optimizers(self):
        """The optimizer and LR schedule of ``optim``; defaults are :class:`~ifdistill.train.schemas.OptimSchema`'s
        (their one home, also what ``conf/train.yaml`` is validated against)."""
        from ifdistill.train.schemas import OptimSchema

        o = OptimSchema(**self.optim_cfg)
        params = [p for p in self.lm.parameters() if p.requires_grad]
        if not params:
            raise RuntimeError("no trainable parameters (peft froze everything?)")
        kwargs = dict(lr=float(o.lr), betas=tuple(o.betas), eps=float(o.eps), weight_decay=float(o.weight_decay))
        if o.name == "deepspeed_cpu_adam":
            from deepspeed.ops.adam import DeepSpeedCPUAdam

            optimizer = DeepSpeedCPUAdam(params, adamw_mode=True, **kwargs)
        elif o.name == "adamw":
            fused = o.fused
            if fused is None:  # torch's fused kernel: one launch per step, and it can skip a step on the device
                fused = o.foreach is None and all(p.device.type == "cuda" for p in params)
            optimizer = torch.optim.AdamW(params, foreach=None if fused else o.foreach, fused=bool(fused), **kwargs)
        elif o.name == "sgd":  # plain SGD: updates proportional to gradients, used by exact-equality tests
            optimizer = torch.optim.SGD(params, lr=kwargs["lr"], weight_decay=kwargs["weight_decay"])
        else:
            raise ValueError(f"optim.name must be adamw, sgd or deepspeed_cpu_adam, got {o.name!r}")
        max_steps = self.trainer.max_steps if self._trainer is not None else -1
        fn = lr_lambda(o.schedule, int(o.warmup_steps), max(max_steps, 1), float(o.min_lr_ratio))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, fn)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
