"""Per-token divergences of on-policy distillation as pure tensor functions.

Conventions are :mod:`ifdistill.train.losses`'s: ``(N, V)`` student and teacher logits aligned with
``(N,)`` labels (the tokens at those positions: the student's sample or the gold completion);
positions labelled ``ignore_index`` count for nothing; ``reduction`` is ``mean`` (over counted
tokens), ``sum`` or ``none``. The teacher's logits carry no gradient (computed under ``no_grad``).

- ``forward`` KL(p_t || p_s), ``reverse`` KL(p_s || p_t) and generalised ``jsd`` (weight ``beta`` on
  the teacher) over the full vocabulary: :func:`ifdistill.train.losses.divergence`, the same functions
  off-policy distillation uses (and so chunked through the LM head the same way).
- ``sampled``: the single-sample estimate of the reverse KL at the token ``y`` the student sampled,
  ``log p_s(y) - log p_t(y)`` (Thinking Machines' on-policy distillation: a per-token reward
  ``-(log p_s - log p_t)``). Its expectation over ``y ~ p_s`` is KL(p_s || p_t). As a loss it is the
  score-function surrogate ``sg(log p_s(y) - log p_t(y)) * log p_s(y)``: its gradient has expectation
  ``grad KL(p_s || p_t)`` (the term ``E[grad log p_s] = 0`` drops out), and it reads two numbers per
  token instead of a softmax over V for the teacher's side. :func:`sampled_kl` returns the loss (the
  surrogate's gradient with the estimate's value: ``a - sg(a) + sg(e)`` for surrogate ``a`` and estimate
  ``e``, so a logged loss is the estimate, not the surrogate) and the estimate (what is logged as the
  divergence). Both hold only for ``y ~ p_s``: a token of a gold completion, or one drawn at another
  temperature, top-p or greedily, is not such a sample (:mod:`.checks` says what the method refuses).

``topk`` (the full-vocabulary kinds only) is :func:`~ifdistill.train.losses.divergence`'s: both
distributions renormalised on the teacher's k largest logits.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ifdistill.train.losses import DIVERGENCES, IGNORE_INDEX, _reduce, divergence

KINDS = (*DIVERGENCES, "sampled")


def sampled_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor, *,
               ignore_index: int = IGNORE_INDEX, reduction: str = "mean") -> tuple[torch.Tensor, torch.Tensor]:
    """``(surrogate, estimate)`` of the sampled-token reverse KL (module docstring)."""
    keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels)).unsqueeze(-1)
    log_s = F.log_softmax(student_logits.float(), dim=-1).gather(-1, safe).squeeze(-1)
    log_t = F.log_softmax(teacher_logits.float(), dim=-1).gather(-1, safe).squeeze(-1)
    estimate = log_s.detach() - log_t.detach()
    surrogate = estimate * log_s
    loss = surrogate - surrogate.detach() + estimate  # the surrogate's gradient, the estimate's value
    return _reduce(loss, keep, reduction), _reduce(estimate, keep, reduction)


def token_divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor, *,
                     kind: str, beta: float = 0.5, temperature: float = 1.0, topk: Optional[int] = None,
                     ignore_index: int = IGNORE_INDEX, reduction: str = "sum") -> tuple[torch.Tensor, torch.Tensor]:
    """``(loss, value)``: what is differentiated and what is logged; equal for the full-vocabulary kinds."""
    if kind not in KINDS:
        raise ValueError(f"divergence kind must be one of {KINDS}, got {kind!r}")
    if kind == "sampled":
        if temperature != 1.0:
            raise ValueError("the sampled-token estimator is taken at temperature 1 (the sampling distribution)")
        if topk is not None:
            raise ValueError("the sampled-token estimator reads full-vocabulary log-probabilities: no topk")
        return sampled_kl(student_logits, teacher_logits, labels, ignore_index=ignore_index, reduction=reduction)
    d = divergence(student_logits, teacher_logits, labels, kind=kind, beta=beta, temperature=temperature,
                   topk=topk, ignore_index=ignore_index, reduction=reduction)
    return d, d.detach()
