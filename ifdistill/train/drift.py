"""Drift from the base model on the held-out sets: KL(base || model) and KL(model || base) per token.

Why: how far a fine-tuned model has moved from its base *on the new task's distribution* predicts how
much it forgets better than the training loss does ("RL's Razor", arXiv 2509.04259; Biderman et al.
2024 plot learning against forgetting the same way). The held-out validation already runs the model
on every held-out source (the new data and, with replay, the replay data); the drift is two more sums
over the same supervised positions, logged as ``val/<source>/kl_base_model`` and
``val/<source>/kl_model_base`` (nats per supervised token) next to ``ce``/``acc``/``entropy``.

The base (:class:`BaseReference`) is the model as it was before training, without a second copy of the
weights where none is needed:

- LoRA: the same weights with the adapter disabled (PEFT's ``disable_adapter``);
- full fine-tuning with a frozen initial teacher (distillation, ``teacher=frozen_initial``): that copy;
- otherwise (full-weight SFT, or a separate or self teacher): a frozen copy taken in the module's
  ``setup``, which Lightning calls before it restores a checkpoint, so a resumed run still compares
  with the initial weights. Like the teacher's copy it is kept out of the module tree (not saved, not
  wrapped by a strategy) and replicated, not sharded, under ZeRO-3/FSDP.

Chunking follows the held-out metrics (:func:`ifdistill.train.chunked_head.chunked_sums`): the base's
hidden states at the supervised positions are computed first (``(N, H)``, no logits), then inside the
model's LM-head call the two sets of logits are made ``chunk_size`` rows at a time, so at most one
chunk's ``(chunk_size, V)`` logits of each model exist at once.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ifdistill.train.chunked_head import _is_lora_linear, call_as_forward
from ifdistill.train.losses import token_stats
from ifdistill.train.modeling import SelectiveLM, adapter_disabled, is_peft
from ifdistill.train.token_sums import ratio, token_metrics

DRIFT_KEYS = ("kl_base_model", "kl_model_base")


def drift_sums(logits: torch.Tensor, base_logits: torch.Tensor) -> dict[str, torch.Tensor]:
    """Sums over the rows of ``(N, V)`` logits of KL(base || model) and KL(model || base), float32, no gradient.

    One log-softmax per side serves both directions: ``KL(p || q) = sum_v p_v (log p_v - log q_v)``."""
    with torch.no_grad():
        logp, logq = F.log_softmax(logits.float(), dim=-1), F.log_softmax(base_logits.float(), dim=-1)
        diff = logq - logp
        return {"kl_base_model": (logq.exp() * diff).sum(), "kl_model_base": -(logp.exp() * diff).sum()}


def held_out_metrics(sums: Mapping[str, float]) -> dict[str, float]:
    """:func:`~ifdistill.train.token_sums.token_metrics`, and the per-token drift when ``sums`` has it."""
    out = token_metrics(sums)
    out.update({k: ratio(sums, k, "count") for k in DRIFT_KEYS if k in sums})
    return out


class BaseReference:
    """The base model of a training module, as the validation step reads it (module docstring)."""

    def __init__(self, lm: SelectiveLM, *, adapter: bool, own_copy: bool):
        self.lm, self.adapter, self.own_copy = lm, adapter, own_copy  # adapter: ``lm`` is the model itself

    @classmethod
    def of(cls, module: Any) -> "BaseReference":
        """The base of ``module`` (an SFT or distillation module), reusing what it already holds."""
        if is_peft(module.model):
            return cls(module.lm, adapter=True, own_copy=False)
        frozen = getattr(module, "_frozen", None)
        if frozen and getattr(module, "teacher_kind", None) == "frozen_initial":
            return cls(frozen[0], adapter=False, own_copy=False)
        lm = copy.deepcopy(module.lm).requires_grad_(False).train(False)
        return cls(lm, adapter=False, own_copy=True)

    def base_head(self, head: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
        """The base's LM head, given the model's (called inside the model's head call): a LoRA head's
        own base layer, the copy's head, or the same head when neither applies."""
        if not self.adapter:
            return self.lm.output_head()
        if _is_lora_linear(head):
            return head.base_layer
        return lambda h: type(head).forward(head, h)

    def hidden(self, batch: Mapping[str, torch.Tensor], rows: torch.Tensor, cols: torch.Tensor,
               device: torch.device) -> torch.Tensor:
        """The base's ``(N, H)`` hidden states at the supervised positions (eval mode, no gradient)."""
        if not self.adapter:  # a frozen copy outside the module tree (the module itself is the strategy's)
            self.lm.to(device)
        was = self.lm.training
        context = adapter_disabled(self.lm.model) if self.adapter else contextlib.nullcontext()
        with torch.no_grad(), context:
            self.lm.train(False)
            try:
                return self.lm(batch["input_ids"], rows, cols, attention_mask=batch.get("attention_mask"),
                               position_ids=batch.get("position_ids"), cu_seqlens=batch.get("cu_seqlens"),
                               max_seqlen=batch.get("max_seqlen"), head=False)
            finally:
                self.lm.train(was)

    def validation_sums(self, module: Any, batch: Mapping[str, torch.Tensor], rows: torch.Tensor,
                        cols: torch.Tensor, targets: torch.Tensor,
                        chunk_size: Optional[int]) -> dict[str, torch.Tensor]:
        """The held-out sums (:func:`~ifdistill.train.losses.token_stats`) and the drift sums of one batch."""
        base_hidden = self.hidden(batch, rows, cols, targets.device)

        def in_head(hidden: torch.Tensor, head: nn.Module) -> dict[str, torch.Tensor]:
            base_head = self.base_head(head)
            # the base head's input in its own weights' dtype: a frozen copy stays float32 while a strategy
            # (DeepSpeed bf16) casts the trained model to bf16 and runs it without autocast
            weight = getattr(base_head, "weight", None)
            dtype = weight.dtype if isinstance(weight, torch.Tensor) and weight.is_floating_point() else hidden.dtype

            def forward(h: torch.Tensor) -> dict[str, torch.Tensor]:
                step = chunk_size or max(h.shape[0], 1)
                sums: dict[str, torch.Tensor] = {}
                for start in range(0, max(h.shape[0], 1), step):
                    part = slice(start, start + step)
                    logits = type(head).forward(head, h[part]).float()
                    base_logits = base_head(base_hidden[part].to(dtype)).float()
                    for k, v in {**token_stats(logits, targets[part]), **drift_sums(logits, base_logits)}.items():
                        sums[k] = sums[k] + v if k in sums else v
                return sums

            with torch.no_grad():
                return call_as_forward(head, forward, hidden)

        return module.student(batch, rows, cols, in_head)
