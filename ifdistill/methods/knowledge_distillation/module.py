"""The knowledge-distillation module both distillation methods extend: the teacher reads its view (``k``
demonstrations + prompt + completion, or the student's own tokens), the student prompt + completion, and on
the completion tokens ``loss = kd_ratio * D(teacher, student) + (1 - kd_ratio) * CE``.

The batch comes from :class:`ifdistill.data.collate.IclCollator`: the student view (``input_ids``,
``attention_mask``, ``labels``), the teacher view (``teacher_*``) and, per example, the aligned
positions of the completion tokens in both (``student_positions``, ``teacher_positions``,
``completion_valid``). The logits that predict the token at position ``p`` sit at ``p - 1``. With
demonstrations shared per micro-batch (:mod:`ifdistill.methods.distill.shared_demos`) the teacher runs one
prefix once and continues it with the rows that read it (``teacher_prefix_rows``; the other rows' teacher
reads the student's own tokens).

Teachers (``teacher=``; a method adds its own through :meth:`KDModule.frozen_teacher`):

- ``frozen_initial``: the model as it was before training. With LoRA that is the *same* weights with
  the adapter disabled (PEFT's ``disable_adapter``) -- no second copy in memory. Without LoRA a frozen
  copy is taken at construction, before any checkpoint is loaded, so a resumed run still distils from
  the initial weights.
- ``self_stopgrad``: the current weights, under ``no_grad`` (the target moves with training).

The teacher always runs under ``no_grad`` and in eval mode (no dropout: the target must not be noisy),
and only at the completion positions of the LM head. Frozen copies are kept out of the module tree
(no checkpoint bloat, not wrapped by DDP/DeepSpeed/FSDP) and moved to the device at fit start; under
ZeRO-3/FSDP they are therefore replicated, not sharded -- prefer LoRA + ``frozen_initial`` for big models.

Logged besides the SFT metrics: ``train/kd`` (the divergence) and the teacher's own ``teacher/ce``,
``teacher/acc`` and ``teacher/entropy`` on the completion -- how much the demonstrations help.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from typing import Any, Optional

import torch

from ifdistill.config import ModelSchema
from ifdistill.methods.knowledge_distillation.hooks import KDHooks
from ifdistill.methods.knowledge_distillation.settings import KDSettings
from ifdistill.methods.sft.module import STAT_KEYS, SFTModule
from ifdistill.train.chunked_head import Head, head_tensors
from ifdistill.train.losses import ce_kd_with_stats, divergence, token_stats
from ifdistill.train.method import TrainingInputs
from ifdistill.train.modeling import SelectiveLM, adapter_disabled, is_peft, torch_dtype
from ifdistill.train.token_sums import ratio


@contextlib.contextmanager
def eval_mode(module: torch.nn.Module):
    was = module.training
    module.train(False)
    try:
        yield
    finally:
        module.train(was)


class KDModule(KDHooks, SFTModule):
    """SFT plus a logit-distillation term from a teacher (module docstring)."""

    def __init__(self, inputs: TrainingInputs, settings: Optional[KDSettings] = None):
        s = settings if settings is not None else self.settings_class()
        super().__init__(inputs, s)
        self.kd = dict(kd_ratio=float(s.kd_ratio), kind=s.kl, beta=float(s.beta), temperature=float(s.temperature),
                       topk=int(s.topk) if s.topk else None)
        self.teacher_kind = s.teacher
        self._frozen: list[SelectiveLM] = []  # a list: hidden from the module tree on purpose
        teacher = self.frozen_teacher(inputs, s)
        if teacher is not None:
            self._frozen.append(self._freeze(teacher))

    def frozen_teacher(self, inputs: TrainingInputs, s: KDSettings) -> Optional[SelectiveLM]:
        """The teacher kept apart from the student, or ``None`` where the teacher is the student's own weights
        (``frozen_initial`` with LoRA: the adapter disabled; ``self_stopgrad``). A method adding a teacher
        (a separate model, an EMA copy) overrides it."""
        if s.teacher != "frozen_initial" or is_peft(self.model):
            return None
        # in model.dtype, as a teacher loaded on its own (build_model): autocast caches its casts only of
        # weights that require grad, and would cast a float32 copy's every weight again at every forward
        dtype = torch_dtype(inputs.dtype or inputs.model.get("dtype") or ModelSchema.dtype)
        return copy.deepcopy(self.lm).to(dtype)

    @staticmethod
    def _freeze(lm: SelectiveLM) -> SelectiveLM:
        lm.requires_grad_(False)
        return lm.train(False)

    def _train_keys(self) -> tuple[str, ...]:
        return super()._train_keys() + ("kd", "ce") + tuple("teacher_" + k for k in STAT_KEYS)

    def on_fit_start(self) -> None:
        self.on_fit_start_teacher()

    def on_fit_start_teacher(self) -> None:
        """The frozen teacher on the module's device."""
        for lm in self._frozen:
            lm.to(self.device)

    # -- the two views ----------------------------------------------------------------------------
    @staticmethod
    def completion_index(batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``rows``, student logit columns, teacher logit columns, targets -- one entry per completion token.

        With a shared demonstration prefix a prefix row's teacher continues the prefix with the student's
        tokens after the head, so its columns are the student's minus ``teacher_head_len``; an identity
        row's teacher reads the student's tokens, so its columns are the student's.
        """
        rows, c = batch["completion_valid"].nonzero(as_tuple=True)
        s_pos = batch["student_positions"][rows, c]
        if "teacher_prefix_ids" in batch:
            shift = batch["teacher_prefix_rows"][rows].long() * batch["teacher_head_len"]
            t_cols = s_pos - 1 - shift
        else:
            t_cols = batch["teacher_positions"][rows, c] - 1
        return rows, s_pos - 1, t_cols, batch["input_ids"][rows, s_pos]

    def _teacher(self) -> tuple[SelectiveLM, Any]:
        if self._frozen:
            return self._frozen[0], contextlib.nullcontext()
        if self.teacher_kind == "frozen_initial":
            return self.lm, adapter_disabled(self.model)
        return self.lm, contextlib.nullcontext()

    def teacher_logits(self, batch: Mapping[str, torch.Tensor], rows: torch.Tensor, cols: torch.Tensor, *,
                       head: bool = True) -> torch.Tensor:
        """The teacher's logits (or, ``head=False``, hidden states) at the completion positions, no_grad."""
        lm, ctx = self._teacher()
        with torch.no_grad(), ctx, eval_mode(lm):
            if "teacher_prefix_ids" not in batch:
                return lm(batch["teacher_input_ids"], rows, cols, attention_mask=batch.get("teacher_attention_mask"),
                          head=head)
            return self._shared_prefix_logits(lm, batch, rows, cols, head)

    @staticmethod
    def _shared_prefix_logits(lm: SelectiveLM, batch: Mapping[str, torch.Tensor], rows: torch.Tensor,
                              cols: torch.Tensor, head: bool = True) -> torch.Tensor:
        """Prefix rows continue the shared prefix; identity rows run on their own tokens (one call each)."""
        ids, mask = batch["input_ids"], batch["attention_mask"]
        skip = int(batch["teacher_head_len"])
        prefix_rows = batch["teacher_prefix_rows"]
        if bool(prefix_rows.all()):
            return lm(ids[:, skip:], rows, cols, attention_mask=mask[:, skip:], prefix_ids=batch["teacher_prefix_ids"],
                      head=head)
        on_prefix = prefix_rows[rows]
        index_in = torch.cumsum(prefix_rows.long(), 0) - 1, torch.cumsum((~prefix_rows).long(), 0) - 1
        a = lm(ids[prefix_rows, skip:], index_in[0][rows[on_prefix]], cols[on_prefix],
               attention_mask=mask[prefix_rows, skip:], prefix_ids=batch["teacher_prefix_ids"], head=head)
        b = lm(ids[~prefix_rows], index_in[1][rows[~on_prefix]], cols[~on_prefix], attention_mask=mask[~prefix_rows],
               head=head)
        out = a.new_empty((rows.numel(), a.shape[-1]))
        out[on_prefix], out[~on_prefix] = a, b
        return out

    def objective(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        rows, s_cols, t_cols, targets = self.completion_index(batch)
        return self.head_objective(
            lambda head: self.student(batch, rows, s_cols, head),
            targets, self.loss_from_logits,
            teacher=lambda head: self.teacher_logits(batch, rows, t_cols, head=head), teacher_head=self.teacher_head)

    def teacher_head(self, student: Head) -> Head:
        """The teacher's LM head as tensors, given the student's (gathered where the strategy shards it):
        a frozen copy's own head, the student's head without its adapter (``frozen_initial`` with LoRA),
        or the student's head itself (``self_stopgrad``)."""
        if self._frozen:
            return head_tensors(self._frozen[0].output_head())
        return student.base() if self.teacher_kind == "frozen_initial" else student

    def loss_from_logits(self, s_logits: torch.Tensor, targets: torch.Tensor,
                         t_logits: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``kd_ratio * D(teacher, student) + (1 - kd_ratio) * CE`` summed over the tokens, and the sums to log."""
        r = self.kd["kd_ratio"]
        if self.kd["kind"] == "forward" and self.kd["temperature"] == 1.0 and self.kd["topk"] is None:
            return ce_kd_with_stats(s_logits, targets, t_logits, kd_ratio=r)  # the default: one fused pass
        ce, stats = ce_kd_with_stats(s_logits, targets)
        kd = divergence(s_logits, t_logits, targets, kind=self.kd["kind"], beta=self.kd["beta"],
                        temperature=self.kd["temperature"], topk=self.kd["topk"], reduction="sum")
        stats.update({"kd": kd.detach(), "ce": ce.detach()})
        stats.update({"teacher_" + k: v for k, v in token_stats(t_logits, targets).items()})
        return r * kd + (1.0 - r) * ce, stats

    def train_metrics(self, sums: Mapping[str, float]) -> dict[str, float]:
        out = super().train_metrics(sums)
        out["train/kd"] = ratio(sums, "kd", "count")
        out.update(self.teacher_metrics(sums))
        return out

    def teacher_metrics(self, sums: Mapping[str, float]) -> dict[str, float]:
        """The teacher's own cross-entropy, accuracy and entropy on the completion tokens."""
        return {"teacher/ce": ratio(sums, "teacher_nll", "teacher_count"),
                "teacher/acc": ratio(sums, "teacher_correct", "teacher_count"),
                "teacher/entropy": ratio(sums, "teacher_entropy", "teacher_count")}
