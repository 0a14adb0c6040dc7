"""Reference implementations of the teacher-forced losses, for tests only.

Training computes its objective with the fused :func:`ifdistill.train.losses.ce_kd_with_stats` (one
log-softmax per side, a closed-form gradient) at positions selected before the LM head. These are the
plain, one-formula-each versions the fused path and the metrics are checked against: each goes through
``torch.nn.functional`` and autograd and shares no code with the fused path but the divergence (the
function training itself calls for the non-default divergences).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ifdistill.train.losses import IGNORE_INDEX, divergence


def shift_for_causal_lm(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Align ``(B, L, V)`` logits with unshifted ``(B, L)`` labels: drop the last logit and the first label."""
    return logits[..., :-1, :], labels[..., 1:]


def reduce(values: torch.Tensor, keep: torch.Tensor, reduction: str) -> torch.Tensor:
    values = torch.where(keep, values, torch.zeros((), dtype=values.dtype))
    if reduction == "none":
        return values
    if reduction == "sum":
        return values.sum()
    return values.sum() / keep.sum().clamp(min=1)


def cross_entropy(logits, labels, *, reduction: str = "mean") -> torch.Tensor:
    """Teacher-forced cross-entropy (nats), float32."""
    keep = labels != IGNORE_INDEX
    nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1),
                          ignore_index=IGNORE_INDEX, reduction="none").reshape(labels.shape)
    return reduce(nll, keep, reduction)


def token_accuracy(logits, labels, *, reduction: str = "mean") -> torch.Tensor:
    """Top-1 accuracy (ties: the lowest id wins, as ``argmax``)."""
    return reduce((logits.argmax(dim=-1) == labels).to(torch.float32), labels != IGNORE_INDEX, reduction)


def token_entropy(logits, labels, *, reduction: str = "mean") -> torch.Tensor:
    """Entropy (nats) of the predictive distribution at the counted positions."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return reduce(-(logp.exp() * logp).sum(dim=-1), labels != IGNORE_INDEX, reduction)


def distillation_loss(student_logits, teacher_logits, labels, *, kd_ratio: float, reduction: str = "mean",
                      **kd) -> torch.Tensor:
    """``kd_ratio * divergence + (1 - kd_ratio) * cross-entropy`` over the counted positions."""
    if not 0.0 <= kd_ratio <= 1.0:
        raise ValueError(f"kd_ratio must be in [0, 1], got {kd_ratio}")
    d = divergence(student_logits, teacher_logits, labels, reduction=reduction, **kd)
    return kd_ratio * d + (1.0 - kd_ratio) * cross_entropy(student_logits, labels, reduction=reduction)
