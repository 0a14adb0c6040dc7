"""Losses and teacher-forced metrics as pure tensor functions (no module state, no distributed code).

Conventions (torchtune's): every function takes ``logits`` of shape ``(..., V)`` and ``labels`` of the
same leading shape that are *already aligned* -- ``logits[i]`` predicts ``labels[i]``. Positions whose
label is ``ignore_index`` count for nothing. ``reduction="mean"`` averages over the counted tokens,
``"sum"`` sums them, ``"none"`` returns per-position values (0 where ignored).

The causal shift lives in exactly one place, :func:`supervised_positions`: logits at position ``t``
predict the token at ``t + 1``. Training code selects supervised positions *before* the LM head
(``ifdistill.train.modeling.SelectiveLM``), so it passes ``(N, V)`` logits and ``(N,)`` targets. The
objective is :func:`ce_kd_with_stats` (one fused pass); the non-default divergences add
:func:`divergence`; plain one-formula references of the losses live with the tests
(``tests/unit/train/reference_losses.py``).

Why sums matter: a batch-level metric must be ``sum over tokens / number of tokens`` across every
micro-batch and rank. A mean of per-batch means weights a 3-token batch like a 300-token one, so the
training code aggregates the ``"sum"`` reductions and a token count (:func:`token_stats`) and divides
once at the end.

Divergences between a student and a teacher distribution (per position, then reduced):

- ``forward``  KL(p_teacher || p_student)  -- mass-covering (standard KD);
- ``reverse``  KL(p_student || p_teacher)  -- mode-seeking;
- ``jsd``      generalised Jensen-Shannon with weight ``beta`` on the teacher:
  ``M = beta * p_t + (1 - beta) * p_s``, ``JSD_beta = beta * KL(p_t || M) + (1 - beta) * KL(p_s || M)``
  (``beta = 0.5`` is the symmetric JSD; it tends to 0 at ``beta`` 0 or 1, so ``0 < beta < 1``).

``temperature`` T divides both sets of logits and the divergence is multiplied by T**2 (Hinton et al.):
the gradient of a softened KL shrinks like 1/T**2, and the factor keeps its scale comparable to CE.
``topk=k`` keeps the teacher's k largest logits per position and compares both distributions
*renormalised on that support* (gathered student logits, then log-softmax), so all three divergences
stay finite and the teacher's tail (often noise) does not have to be stored or matched.
A teacher read from the teacher cache goes through :func:`cached_kd_with_stats` instead: the top-k *and*
the tail mass as one more outcome, so the student's mass off the top-k is matched too.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
DIVERGENCES = ("forward", "reverse", "jsd")


def supervised_positions(labels: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, cols)`` of the logits that predict a supervised token of unshifted ``(B, L)`` labels,
    in row-major order; the targets are ``labels[rows, cols + 1]``."""
    rows, cols = (labels[:, 1:] != ignore_index).nonzero(as_tuple=True)
    return rows, cols


def _reduce(values: torch.Tensor, keep: torch.Tensor, reduction: str) -> torch.Tensor:
    values = torch.where(keep, values, torch.zeros((), dtype=values.dtype, device=values.device))
    if reduction == "none":
        return values
    if reduction == "sum":
        return values.sum()
    if reduction == "mean":
        return values.sum() / keep.sum().clamp(min=1)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def token_stats(logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = IGNORE_INDEX) -> dict[str, torch.Tensor]:
    """Sums for aggregation: ``nll``, ``correct``, ``entropy`` and the token ``count`` (all float32 scalars,
    detached). One log-softmax serves all three."""
    with torch.no_grad():
        keep = labels != ignore_index
        logp = F.log_softmax(logits.float(), dim=-1)
        safe = torch.where(keep, labels, torch.zeros_like(labels))
        nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
        correct = (logits.argmax(dim=-1) == labels).to(torch.float32)
        ent = -(logp.exp() * logp).sum(dim=-1)
        return {"nll": _reduce(nll, keep, "sum"), "correct": _reduce(correct, keep, "sum"),
                "entropy": _reduce(ent, keep, "sum"), "count": keep.sum().to(torch.float32)}


def _row_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``(a * b).sum(-1)`` as a batched matrix product: no ``(..., V)`` temporary."""
    v = a.shape[-1]
    return torch.bmm(a.reshape(-1, 1, v), b.reshape(-1, v, 1)).reshape(a.shape[:-1])


class _SoftmaxLosses(torch.autograd.Function):
    """Forward: one log-softmax per side feeds the loss and every statistic. Backward: the closed form
    ``w * (p_s - (1 - r) * onehot - r * p_t)`` from the saved probabilities (no log-softmax backward)."""

    @staticmethod
    def forward(ctx, logits, safe, weight, teacher_logits, kd_ratio):
        # The teacher's side first, its log-probabilities freed before the student's exist: at most five
        # (N, V) tensors live at once (both logits, p_t, log p_s, p_s), and the row dot products make none.
        tp = None
        sums = {}
        if teacher_logits is not None:
            tlogp = F.log_softmax(teacher_logits, dim=-1)
            tp = tlogp.exp()
            t_neg_ent = _row_dot(tp, tlogp)
            teacher_nll = -(tlogp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * weight).sum()
            del tlogp
        logp = F.log_softmax(logits, dim=-1)
        p = logp.exp()
        nll = -logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
        sums.update(nll=(nll * weight).sum(), entropy=-(_row_dot(p, logp) * weight).sum())
        loss = sums["nll"].clone()
        if tp is not None:
            kd = t_neg_ent - _row_dot(tp, logp)  # KL(p_t || p_s) = sum p_t log p_t - sum p_t log p_s
            sums["kd"] = (kd * weight).sum()
            sums["teacher_nll"] = teacher_nll
            sums["teacher_entropy"] = -(t_neg_ent * weight).sum()
            loss = kd_ratio * sums["kd"] + (1.0 - kd_ratio) * sums["nll"]
        ctx.kd_ratio = kd_ratio
        ctx.save_for_backward(p, safe, weight, tp if kd_ratio != 0.0 else None)
        ctx.mark_non_differentiable(*sums.values())
        return (loss, *sums.values())

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        p, safe, weight, tp = ctx.saved_tensors
        r = ctx.kd_ratio
        gw = (grad_loss * weight).unsqueeze(-1)
        grad = p * gw
        grad.scatter_add_(-1, safe.unsqueeze(-1), -(1.0 - r) * gw if r != 0.0 else -gw)
        if tp is not None:
            grad.addcmul_(tp, gw, value=-r)
        return grad, None, None, None, None


def ce_kd_with_stats(logits: torch.Tensor, labels: torch.Tensor, teacher_logits: Optional[torch.Tensor] = None, *,
                     kd_ratio: float = 0.0, ignore_index: int = IGNORE_INDEX) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training objective and its token sums in one pass over ``(N, V)`` logits.

    Without a teacher: the sum of the cross-entropy over the counted tokens and the
    :func:`token_stats` sums. With one:
    ``kd_ratio * sum KL(teacher || student) + (1 - kd_ratio) * sum CE`` (forward KL, temperature 1, no
    top-k: the default distillation setting) plus ``kd``/``ce`` and the teacher's ``teacher_*`` sums.

    Why: computed separately, the loss, its backward and the logged metrics take about a dozen passes
    over the ``(N, V)`` logits (a log-softmax for the loss, another for the metrics, the log-softmax
    backward, ...), which is ~10% of a small model's SFT step on CPU. Here each side gets one
    log-softmax and one exp, the gradient is the closed form above, and the metrics reuse the same
    probabilities. Values equal the tests' reference functions up to float rounding.
    """
    if not 0.0 <= kd_ratio <= 1.0:
        raise ValueError(f"kd_ratio must be in [0, 1], got {kd_ratio}")
    keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    weight = keep.to(torch.float32)
    t = teacher_logits.detach().float() if teacher_logits is not None else None
    loss, *values = _SoftmaxLosses.apply(logits.float(), safe, weight, t, float(kd_ratio))
    names = ["nll", "entropy"] + (["kd", "teacher_nll", "teacher_entropy"] if t is not None else [])
    stats = dict(zip(names, values))
    with torch.no_grad():
        stats["correct"] = ((logits.argmax(dim=-1) == labels) & keep).sum().to(torch.float32)
        stats["count"] = weight.sum()
        if t is not None:
            stats["ce"] = stats["nll"]
            stats["teacher_correct"] = ((t.argmax(dim=-1) == labels) & keep).sum().to(torch.float32)
            stats["teacher_count"] = stats["count"]
    return loss, stats


def _log_probs(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float,
               topk: Optional[int]) -> tuple[torch.Tensor, torch.Tensor]:
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    s = student_logits.float() / temperature
    t = teacher_logits.float() / temperature
    if topk is not None and 0 < topk < t.shape[-1]:
        idx = t.topk(topk, dim=-1).indices
        s, t = s.gather(-1, idx), t.gather(-1, idx)
    return F.log_softmax(s, dim=-1), F.log_softmax(t, dim=-1)


def _kl(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Per-position KL(p || q) from log-probabilities; terms with p = 0 contribute exactly 0."""
    p = logp.exp()
    return torch.where(p > 0, p * (logp - logq), torch.zeros((), dtype=p.dtype, device=p.device)).sum(-1)


def divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor, *,
               kind: str = "forward", beta: float = 0.5, temperature: float = 1.0, topk: Optional[int] = None,
               ignore_index: int = IGNORE_INDEX, reduction: str = "mean") -> torch.Tensor:
    """Student-teacher divergence per position (see the module docstring), masked by ``labels``.

    The teacher logits should carry no gradient (the caller computes them under ``no_grad``); this
    function does not detach them so that it stays a plain mathematical function.
    """
    if kind not in DIVERGENCES:
        raise ValueError(f"divergence kind must be one of {DIVERGENCES}, got {kind!r}")
    keep = labels != ignore_index
    s, t = _log_probs(student_logits, teacher_logits, temperature, topk)
    if kind == "forward":
        per = _kl(t, s)
    elif kind == "reverse":
        per = _kl(s, t)
    else:
        if not 0.0 < beta < 1.0:
            raise ValueError(f"jsd needs 0 < beta < 1, got {beta} (beta -> 0 or 1 makes it vanish)")
        m = torch.logsumexp(torch.stack([t + torch.log(torch.tensor(beta)),
                                         s + torch.log(torch.tensor(1.0 - beta))]), dim=0)
        per = beta * _kl(t, m) + (1.0 - beta) * _kl(s, m)
    return _reduce(per * (temperature ** 2), keep, reduction)


class _CachedKD(torch.autograd.Function):
    """Forward: one log-softmax of the student (two at ``T != 1``) feeds the loss and the statistics.
    Backward: the closed form derived in :func:`cached_kd_with_stats`, from the saved probabilities."""

    @staticmethod
    def forward(ctx, logits, safe, weight, ids, t_logp, tail, kd_ratio, temperature):
        logq = F.log_softmax(logits, dim=-1)
        q = logq.exp()
        nll = -logq.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
        sums = {"nll": (nll * weight).sum(), "entropy": -(_row_dot(q, logq) * weight).sum()}
        logq_t = logq if temperature == 1.0 else F.log_softmax(logits / temperature, dim=-1)
        del logq
        q_t = q if temperature == 1.0 else logq_t.exp()
        s_top = logq_t.gather(-1, ids)
        # log q_R = log(1 - sum_S q_i); the clamp keeps it finite where the top-k hold all the student's mass
        log_q_tail = torch.log(-torch.expm1(torch.logsumexp(s_top, dim=-1).clamp(max=-1e-30)))
        p_top = t_logp.exp()
        kd = (p_top * (t_logp - s_top)).sum(-1) + tail * (torch.log(tail.clamp(min=1e-30)) - log_q_tail)
        sums["kd"] = (kd * weight).sum() * temperature ** 2
        loss = kd_ratio * sums["kd"] + (1.0 - kd_ratio) * sums["nll"]
        # the teacher's tail mass spread over the non-top-k tokens in proportion to the student's (see below)
        spread = torch.where(tail > 0, tail / log_q_tail.exp(), torch.zeros_like(tail))
        ctx.kd_ratio, ctx.temperature = kd_ratio, temperature
        ctx.save_for_backward(q, q_t if temperature != 1.0 else None, safe, weight, ids, p_top, spread)
        ctx.mark_non_differentiable(*sums.values())
        return (loss, *sums.values())

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        # grad = w (1 - r) (q - onehot) + w r T (q_T - p~), with p~ = p on S and spread * q_T off it. Written
        # as one (N, V) pass -- q (1 - r) w + q_T r T w (1 - spread) at every token -- plus the corrections at
        # the label and at the k cached ids (r T w (spread * q_T - p) there), as cheap as SFT's backward.
        q, q_t, safe, weight, ids, p_top, spread = ctx.saved_tensors
        r, temp = ctx.kd_ratio, ctx.temperature
        gw = (grad_loss * weight).unsqueeze(-1)
        kd_w = r * temp * gw
        off_top = kd_w * (1.0 - spread.unsqueeze(-1))
        if q_t is None:  # T = 1: q_T is q
            q_t = q
            grad = q * ((1.0 - r) * gw + off_top)
        else:
            grad = torch.addcmul(q * ((1.0 - r) * gw), q_t, off_top)
        grad.scatter_add_(-1, safe.unsqueeze(-1), -(1.0 - r) * gw)
        grad.scatter_add_(-1, ids, kd_w * (q_t.gather(-1, ids) * spread.unsqueeze(-1) - p_top))
        return grad, None, None, None, None, None, None, None


def cached_kd_with_stats(logits: torch.Tensor, labels: torch.Tensor, topk_ids: torch.Tensor, topk_logp: torch.Tensor,
                         tail: torch.Tensor, *, kd_ratio: float, temperature: float = 1.0,
                         ignore_index: int = IGNORE_INDEX) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``kd_ratio * sum KL~ + (1 - kd_ratio) * sum CE`` against a cached teacher, and the token sums.

    The teacher is known only on its top-k support ``S`` (``topk_ids``, ``topk_logp``: log-probabilities at
    temperature ``T``) plus the mass outside it, ``p_R = tail``. ``KL~`` is the forward KL between the
    two distributions coarsened onto the ``k + 1`` outcomes ``S + {R}``: the student's tail bucket is
    ``q_R = 1 - sum_S q_i`` (its mass off the teacher's top-k ids), so

        KL~ = sum_S p_i (log p_i - log q_i) + p_R (log p_R - log q_R),    times T**2 as the online KL.

    By the log-sum inequality ``KL~ <= KL`` (merging outcomes never increases a KL), with equality when
    ``k = V`` (``R`` is empty, ``p_R = 0``) or when teacher and student are proportional on ``R``. Its
    gradient with respect to the student's logits ``z`` (at ``T = 1``) is ``q - p~``, where ``p~`` is the
    teacher on ``S`` and ``p_R * q_j / q_R`` off it: the online gradient ``q - p`` with the unknown tail of
    the teacher spread like the student's. So the cached objective pulls the student to the teacher on
    the top-k and only rescales the rest, instead of pushing the rest to zero as renormalising on ``S``
    (``method.topk``) does.

    Stats: ``nll``, ``entropy``, ``correct``, ``count`` (as :func:`ce_kd_with_stats`), ``kd``, ``ce``,
    ``teacher_correct`` (the teacher's top-1 is the first cached id), ``teacher_mass`` (sum of the top-k
    mass) and ``teacher_count``.
    """
    if not 0.0 <= kd_ratio <= 1.0:
        raise ValueError(f"kd_ratio must be in [0, 1], got {kd_ratio}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    keep = labels != ignore_index
    safe = torch.where(keep, labels, torch.zeros_like(labels))
    weight = keep.to(torch.float32)
    t_logp, tail = topk_logp.detach().float(), tail.detach().float().clamp(min=0.0)
    loss, *values = _CachedKD.apply(logits.float(), safe, weight, topk_ids.long(), t_logp, tail, float(kd_ratio),
                                    float(temperature))
    stats = dict(zip(["nll", "entropy", "kd"], values))
    with torch.no_grad():
        stats["correct"] = ((logits.argmax(dim=-1) == labels) & keep).sum().to(torch.float32)
        stats["count"] = weight.sum()
        stats["ce"] = stats["nll"]
        stats["teacher_correct"] = ((topk_ids[..., 0].long() == labels) & keep).sum().to(torch.float32)
        stats["teacher_mass"] = ((1.0 - tail) * weight).sum()
        stats["teacher_count"] = stats["count"]
    return loss, stats
