"""On-policy ICL distillation: off-policy ICL distillation with the student's own samples as completions.

Per training micro-batch, each example is trained on the student's sample instead of its gold
completion with probability ``lmbda`` (GKD's lambda; ``lmbda=0`` *is* off-policy distillation, the
batch and objective untouched -- with ``kl=sampled``, off-policy distillation with ``kl=reverse``,
below). The student samples from the prompt alone (``generation``: temperature,
top-p, max new tokens; the evaluator's stop tokens); the teacher reads the same sample after its own
view of the prompt: ``k`` demonstrations drawn as for off-policy distillation and/or, with ``own_demo``,
the example's own gold conversation as the last demonstration (self-distillation fine-tuning). Batch
construction: :mod:`.sampling`.

Teacher (``teacher=``): ``frozen_initial`` (LoRA: the adapter disabled; full fine-tuning: a frozen copy),
``ema`` (a frozen copy updated after every optimizer step, ``p_ema <- d p_ema + (1 - d) p`` with
``d = ema_decay``; saved in checkpoints), or ``self_stopgrad`` (the live student under ``no_grad``).

Objective over the completion tokens (sampled or gold), token ``c`` of a completion counted when
``c >= skip_tokens``: ``kd_ratio * sum D(teacher, student) + (1 - kd_ratio) * sum CE(gold rows)``,
both sums over counted tokens only (a skipped token is neither trained nor counted), divided by the
counted tokens of the whole optimizer step -- known only after sampling, so the base class normalises
the summed gradients just before the optimizer steps
(:attr:`~ifdistill.train.method.MethodHooks.normalise_after_backward`). ``kl`` names the divergence
(:mod:`.divergences`: ``forward``, ``reverse``, ``jsd`` with ``beta``, each optionally on the
teacher's ``topk``, or the ``sampled``-token estimator); the full-vocabulary ones run through the
chunked LM head as off-policy distillation does. ``sampled`` applies to sampled rows only: gold rows
get the full-vocabulary reverse KL, the quantity it estimates, and ``train/kd`` logs the estimate,
never the score-function surrogate (:mod:`.settings`: why, and the sampling settings it refuses).

Samples come from HF generation with the training model (``engine=hf``, :mod:`.sampling`) or from a
vLLM engine colocated with training (``engine=vllm``, :mod:`.vllm_engine`: the LoRA adapter or the full
weights pushed to it every ``sync_every`` optimizer steps; ``sync_every > 1`` samples from weights up to
``sync_every - 1`` steps old, which biases the ``sampled`` estimator: :mod:`.settings`).

Monitoring (:mod:`.monitoring`): sampled length, the share of samples that end with a stop token (the
rest hit ``max_new_tokens``), the divergence and both entropies per logging interval; a table of a few
samples every ``sample_table_every`` steps; a warning or a stop when the stop-token rate stays under
``min_eos_rate`` for ``eos_patience`` logging intervals (reverse-KL collapse shows there first).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any, Optional

import torch

from ifdistill.methods.knowledge_distillation.module import KDModule
from ifdistill.methods.onpolicy_distill.divergences import token_divergence
from ifdistill.methods.onpolicy_distill.hooks import OnPolicyDistillHooks
from ifdistill.methods.onpolicy_distill.monitoring import GEN_KEYS, SampleMonitor
from ifdistill.methods.onpolicy_distill.sampling import HFSampler, Sample, prompts, with_samples
from ifdistill.methods.onpolicy_distill.settings import OnPolicyDistillSettings, SamplingSettings
from ifdistill.train.losses import IGNORE_INDEX, ce_kd_with_stats, token_stats
from ifdistill.train.method import TrainingInputs

log = logging.getLogger(__name__)


class OnPolicyDistillModule(OnPolicyDistillHooks, KDModule):
    """Knowledge distillation on a ``lmbda`` share of student samples (module docstring)."""

    normalise_after_backward = True

    def __init__(self, inputs: TrainingInputs, settings: Optional[OnPolicyDistillSettings] = None):
        s = settings if settings is not None else self.settings_class()
        super().__init__(inputs, s)
        self.lmbda, self.ema_decay, self.skip_tokens = float(s.lmbda), float(s.ema_decay), int(s.skip_tokens)
        self.sampling = SamplingSettings(**(s.generation or {}))
        from transformers import AutoTokenizer

        from ifdistill.evaluator.prompts import stop_token_ids as evaluator_stop_ids
        from ifdistill.models import resolve_model_path

        model_dir = resolve_model_path(str(inputs.model["name_or_path"]))
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, revision=inputs.model.get("revision"))
        self.stop_ids = evaluator_stop_ids(self.tokenizer, model_dir, s.stop_token_ids)
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else self.stop_ids[0])
        self.sampler: Any = HFSampler(self.lm.model, self.stop_ids, self.pad_token_id, self.sampling)
        if s.engine == "vllm":
            from ifdistill.methods.onpolicy_distill.vllm_engine import VLLMSampler

            options = dict(s.vllm or {})
            self.sampler = VLLMSampler(self, model_dir, self.stop_ids, self.sampling, sync_every=s.sync_every,
                                       max_model_len=int(options.pop("max_model_len", 2048)), runtime=options,
                                       seed=int(inputs.seed))
        self.monitor = SampleMonitor(self.tokenizer, table_every=s.sample_table_every, table_rows=s.sample_table_rows,
                                     min_eos_rate=s.min_eos_rate, patience=s.eos_patience, action=s.on_eos_collapse)

    def frozen_teacher(self, inputs: TrainingInputs, s: OnPolicyDistillSettings) -> Optional[Any]:
        """``ema``: a copy of the student, updated after every optimizer step; else the shared teachers'."""
        return copy.deepcopy(self.lm) if s.teacher == "ema" else super().frozen_teacher(inputs, s)

    def _train_keys(self) -> tuple[str, ...]:
        return super()._train_keys() + GEN_KEYS

    # -- sampling ---------------------------------------------------------------------------------
    def sample_batch(self, batch: Mapping[str, torch.Tensor]) -> tuple[dict[str, Any], list[Sample]]:
        """Choose each row with probability ``lmbda`` (the step-seeded RNG), sample it, rebuild the batch."""
        n = batch["input_ids"].shape[0]
        chosen = (torch.rand(n) < self.lmbda).nonzero().flatten().tolist() if self.lmbda > 0 else []
        student_prompts = prompts(batch, chosen)[0]
        samples = self.sampler(student_prompts) if chosen else []
        return with_samples(batch, dict(zip(chosen, samples)), self.pad_token_id), samples

    def objective(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        batch, samples = self.sample_batch(batch)
        rows, s_cols, t_cols, targets = self.completion_index(batch)
        c = batch["completion_valid"].nonzero(as_tuple=True)[1]
        gold = ~batch["is_sampled"].to(rows.device)[rows]
        packed = torch.stack([targets, gold.long(), (c >= self.skip_tokens).long()], dim=-1)
        loss, stats = self.head_objective(
            lambda head: self.student(batch, rows, s_cols, head), packed, self.onpolicy_loss,
            teacher=lambda head: self.teacher_logits(batch, rows, t_cols, head=head), teacher_head=self.teacher_head)
        stats.update(self.monitor.sums(samples, self._trainer, batch))
        return loss, stats

    def onpolicy_loss(self, s_logits: torch.Tensor, packed: torch.Tensor,
                      t_logits: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``kd_ratio * sum D + (1 - kd_ratio) * sum CE(gold)`` over the counted tokens of one chunk of
        completion tokens, and its sums (module docstring). ``packed``: target, gold row, counted."""
        y, gold, counted = packed.unbind(-1)
        gold, counted, kd, kind = gold.bool(), counted.bool(), self.kd, self.kd["kind"]
        if kind != "sampled" and bool(gold.all()) and bool(counted.all()):
            return self.loss_from_logits(s_logits, y, t_logits)  # off-policy distillation's own objective
        ignore = torch.full_like(y, IGNORE_INDEX)
        kd_labels, ce_labels = torch.where(counted, y, ignore), torch.where(gold & counted, y, ignore)
        if kind == "sampled":  # the estimator on sampled rows, the reverse KL it estimates on gold rows
            on = torch.where(counted & ~gold, y, ignore)
            on_loss, on_value = token_divergence(s_logits, t_logits, on, kind="sampled", reduction="sum")
            off_loss, off_value = token_divergence(s_logits, t_logits, ce_labels, kind="reverse", reduction="sum")
            kd_loss, kd_value = on_loss + off_loss, on_value + off_value
        else:
            kd_loss, kd_value = token_divergence(s_logits, t_logits, kd_labels, kind=kind, beta=kd["beta"],
                                                 temperature=kd["temperature"], topk=kd["topk"], reduction="sum")
        ce, ce_stats = ce_kd_with_stats(s_logits, ce_labels)
        stats = token_stats(s_logits, kd_labels)
        stats.update({"kd": kd_value.detach(), "ce": ce_stats["nll"]})
        stats.update({"teacher_" + k: v for k, v in token_stats(t_logits, kd_labels).items()})
        r = kd["kd_ratio"]
        return r * kd_loss + (1.0 - r) * ce, stats

    # -- the EMA teacher, logging -------------------------------------------------------------------
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.teacher_kind == "ema" and (batch_idx + 1) % self.trainer.accumulate_grad_batches == 0:
            with torch.no_grad():
                for ema, live in zip(self._frozen[0].parameters(), self.lm.parameters()):
                    ema.lerp_(live.detach().to(ema.dtype), 1.0 - self.ema_decay)
        super().on_train_batch_end(outputs, batch, batch_idx)

    def on_fit_end(self) -> None:
        close = getattr(self.sampler, "close", None)
        if close is not None:
            close()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.teacher_kind == "ema":
            checkpoint["ema_teacher"] = self._frozen[0].state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.teacher_kind == "ema" and "ema_teacher" in checkpoint:
            self._frozen[0].load_state_dict(checkpoint["ema_teacher"])

    def train_metrics(self, sums: Mapping[str, float]) -> dict[str, float]:
        out = super().train_metrics(sums)
        out.update(self.monitor.metrics(sums, self.trainer, self.loggers, staleness=getattr(self.sampler, "staleness", 0)))
        return out
