"""The LM head and the objective chunk by chunk: bounded logit memory at large vocabularies.

Why: the objective needs ``(N, V)`` logits for the student and the teacher at the N supervised
positions. At Qwen3's vocabulary (V = 151,936) one fp32 copy is 0.6 MB per token, and a loss with its
softmax buffers holds several copies at once: ~8 GB above its inputs at N = 2,048 (issue 21). Here
the head is applied to ``chunk_size`` positions at a time; each chunk's logits, softmax buffers and
logit gradient live only while that chunk is processed.

Design: the gradient is computed *in the forward pass*, chunk by chunk (as fused linear-cross-entropy
kernels do), not recomputed in backward. For each chunk: logits ``= head(h_c)`` (the weight's own
dtype, then float32, as the unchunked path computes them), the teacher's logits under ``no_grad``, the
per-chunk objective and sums (any function of ``(student_logits, targets, teacher_logits)``: the fused
forward-KL path, or the general divergences), ``dL/dlogits`` by autograd on that chunk alone, then
``dL/dh_c = g @ W`` and ``dL/dW += g^T @ h_c``. Backward only scales the stored gradients by the
incoming gradient. Recomputing in backward would run the head and the softmax twice (~1.5x the
objective's time); this way the count of passes over the logits equals the unchunked path's.

It needs the head's weight as a plain tensor (:func:`plain_head`): ``nn.Linear`` (tied or not) whose
parameters are whole on this rank -- single process, DDP, DeepSpeed ZeRO-1/2. A head that carries a
LoRA adapter, or whose weight is partitioned (ZeRO-3) or a DTensor (FSDP2), is applied unchunked
(:meth:`ifdistill.train.sft_module.SFTModule.head_objective` falls back and warns once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

import torch
from torch import nn

# A per-chunk objective: (student logits, targets, teacher logits or None) -> (loss sum, {name: sum}).
ChunkObjective = Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor]],
                          tuple[torch.Tensor, dict[str, torch.Tensor]]]


def plain_head(head: nn.Module) -> Optional[tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """``(weight, bias)`` of an LM head that can be applied outside its module, else ``None``."""
    if type(head) is not nn.Linear:  # a PEFT-wrapped head (LoRA on lm_head) has its own forward
        return None
    w = head.weight
    if type(w) is not nn.Parameter and type(w) is not torch.Tensor:  # FSDP2's DTensor parameters
        return None
    if getattr(w, "ds_status", None) is not None or w.dim() != 2 or w.numel() == 0:  # ZeRO-3 partitioned
        return None
    return w, head.bias


class _ChunkedHead(torch.autograd.Function):
    """Forward returns the summed loss and the logged sums; the gradients are computed there too."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, run):
        loss, grads, sums = run(hidden, weight, bias)
        ctx.save_for_backward(*grads)
        ctx.param_dtypes = (weight.dtype, bias.dtype if bias is not None else None)
        ctx.mark_non_differentiable(*sums.values())
        return (loss, *sums.values())

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        w_dtype, b_dtype = ctx.param_dtypes  # the head's gradients are accumulated in float32
        return (grad_h * grad_loss.to(grad_h.dtype) if ctx.needs_input_grad[0] else None,
                (grad_w * grad_loss).to(w_dtype) if ctx.needs_input_grad[1] else None,
                (grad_b * grad_loss).to(b_dtype) if ctx.needs_input_grad[2] else None,
                None)


def chunked_head_objective(hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                           targets: torch.Tensor, objective: ChunkObjective, *, chunk_size: int,
                           teacher_hidden: Optional[torch.Tensor] = None,
                           teacher_head: Optional[tuple[torch.Tensor, Optional[torch.Tensor]]] = None,
                           ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``objective`` over ``(N, H)`` hidden states through the head ``(weight, bias)``, ``chunk_size`` rows at a time.

    Equals ``objective(F.linear(hidden, weight, bias).float(), targets, teacher_logits)`` in value,
    sums and gradients (with respect to ``hidden``, ``weight`` and ``bias``) up to float32 summation
    order; never holds more than one chunk's ``(chunk_size, V)`` logits. ``teacher_hidden`` goes
    through ``teacher_head`` (default: the student's head) under ``no_grad``.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    t_weight, t_bias = teacher_head if teacher_head is not None else (weight, bias)

    names: list[str] = []  # the order of the sums, known once run() has seen the objective's output

    def run(h: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor]):
        n = h.shape[0]
        grad_h = torch.zeros_like(h)
        grad_w = torch.zeros(w.shape, dtype=torch.float32, device=w.device) if w.requires_grad else w.new_zeros(())
        grad_b = (torch.zeros(b.shape, dtype=torch.float32, device=b.device)
                  if b is not None and b.requires_grad else h.new_zeros(()))
        loss = torch.zeros((), dtype=torch.float32, device=h.device)
        sums: dict[str, torch.Tensor] = {}
        for start in range(0, max(n, 1), chunk_size):
            h_c = h[start:start + chunk_size].detach()
            t_c = None
            if teacher_hidden is not None:
                t_c = nn.functional.linear(teacher_hidden[start:start + chunk_size], t_weight, t_bias).float()
            with torch.enable_grad():
                logits = nn.functional.linear(h_c, w.detach(), None if b is None else b.detach()).float()
                logits.requires_grad_(True)
                loss_c, stats_c = objective(logits, targets[start:start + chunk_size], t_c)
                (g,) = torch.autograd.grad(loss_c, logits) if loss_c.requires_grad else (torch.zeros_like(logits),)
            g = g.to(w.dtype)
            grad_h[start:start + chunk_size] = g @ w.detach()
            if w.requires_grad:
                grad_w.addmm_(g.t().float(), h_c.float())
            if b is not None and b.requires_grad:
                grad_b += g.float().sum(0)
            loss += loss_c.detach().float()
            for k, v in stats_c.items():
                sums[k] = sums[k] + v.detach() if k in sums else v.detach().clone()
            del logits, g, t_c
        names.extend(sums)
        return loss, (grad_h, grad_w, grad_b), sums

    loss, *values = _ChunkedHead.apply(hidden, weight, bias, run)
    return loss, dict(zip(names, values))
