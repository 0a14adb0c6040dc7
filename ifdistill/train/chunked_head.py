"""The LM head and the objective chunk by chunk: bounded logit memory at large vocabularies.

Why: the objective needs ``(N, V)`` logits for the student and the teacher at the N supervised
positions. At Qwen3's vocabulary (V = 151,936) one fp32 copy is 0.6 MB per token, and a loss with its
softmax buffers holds several copies at once: ~8 GB above its inputs at N = 2,048. Here
the head is applied to ``chunk_size`` positions at a time; each chunk's logits, softmax buffers and
logit gradient live only while that chunk is processed.

Design: the gradient is computed *in the forward pass*, chunk by chunk (as fused linear-cross-entropy
kernels do), not recomputed in backward. For each chunk: logits ``= head(h_c)`` (the weight's own
dtype, then float32, as the unchunked path computes them), the teacher's logits under ``no_grad``, the
per-chunk objective and sums (any function of ``(student_logits, targets, teacher_logits)``: the fused
forward-KL path, or the general divergences), ``g = dL/dlogits`` by autograd on that chunk alone, then
``dL/dh_c = g @ W`` and ``dL/dW += g^T @ h_c`` (and, for a LoRA adapter on the head, the same for its
two factors). Backward only scales the stored gradients by the incoming gradient. Recomputing in
backward would run the head and the softmax twice (~1.5x the objective's time); this way the count of
passes over the logits equals the unchunked path's.

Precision. The weight-gradient GEMMs (``g^T @ h_c``, and the adapter's two) accumulate into float32
buffers in place (``addmm_``; no ``(V, H)`` temporary per chunk). On CUDA they run with TF32 tensor
cores (float32 accumulation, 10-bit operand mantissas, :func:`_tf32_matmuls`): in full float32 the head's
weight gradient at Qwen3's vocabulary is ~10x the time of its bfloat16 forward. The logits' GEMMs
follow autocast (bfloat16 under ``bf16-mixed``), as in the unchunked path.

Sharded heads. The objective runs *as the head module's forward* (:func:`call_as_forward`), called
from inside the forward of :class:`~ifdistill.train.modeling.SelectiveLM`. Whatever a strategy hooks
onto those calls therefore happens as for a plain ``lm_head(hidden)``: FSDP2 has unsharded the root's
parameters (the head among them) for the root's forward, and reduce-scatters the head's gradient after
backward; ZeRO-3 gathers the head's weight around the head's call, gathers it again before the head's
backward and reduce-scatters the gradient the backward returns. ZeRO-1/2 and DDP see plain tensors.

Not chunked (:func:`unchunkable`; the caller then runs the unchunked path and says why, once): a head
that is neither ``nn.Linear`` nor a plain PEFT LoRA ``Linear`` (one active adapter, no DoRA-style
variant, not merged), and a LoRA-adapted head under ZeRO-3, whose base and adapter weights belong to
submodules that ZeRO-3 gathers only around *their own* calls.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, Optional

import torch
from torch import nn

# A per-chunk objective: (student logits, targets, teacher logits or None) -> (loss sum, {name: sum}).
ChunkObjective = Callable[[torch.Tensor, torch.Tensor, Optional[torch.Tensor]],
                          tuple[torch.Tensor, dict[str, torch.Tensor]]]


@dataclasses.dataclass(frozen=True)
class Head:
    """An LM head as tensors: ``logits = h W^T + b + scaling * (dropout(h) A^T) B^T`` (the last term with LoRA)."""

    weight: torch.Tensor
    bias: Optional[torch.Tensor] = None
    lora_a: Optional[torch.Tensor] = None  # (r, H)
    lora_b: Optional[torch.Tensor] = None  # (V, r)
    scaling: float = 1.0
    dropout: Optional[nn.Module] = None

    def base(self) -> "Head":
        """The head without its adapter (PEFT's ``disable_adapter``)."""
        return Head(self.weight, self.bias)

    def logits(self, h: torch.Tensor, dropped: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Float32 logits computed as the module computes them (``dropped``: ``dropout(h)``, default ``h``)."""
        out = nn.functional.linear(h, self.weight, self.bias)
        if self.lora_a is not None:
            d = (h if dropped is None else dropped).to(self.lora_a.dtype)
            out = (out + nn.functional.linear(nn.functional.linear(d, self.lora_a), self.lora_b) * self.scaling
                   ).to(out.dtype)
        return out.float()


def _lora_adapter(head: nn.Module) -> Optional[str]:
    """The one active, plain LoRA adapter of a PEFT ``Linear``; raises ``ValueError`` when there is none such."""
    if head.merged:
        raise ValueError("its adapter is merged into the weight")
    if head.disable_adapters:
        return None
    active = [a for a in head.active_adapters if a in head.lora_A.keys()]
    if len(active) != 1:
        raise ValueError(f"it has {len(active)} active adapters")
    if active[0] in getattr(head, "lora_variant", {}):
        raise ValueError("its adapter is a LoRA variant (DoRA, ...)")
    return active[0]


def _is_lora_linear(head: nn.Module) -> bool:
    try:
        from peft.tuners.lora import Linear as LoraLinear
    except ImportError:  # peft is a dependency; without it no head is adapted
        return False
    return isinstance(head, LoraLinear)


def unchunkable(head: nn.Module) -> Optional[str]:
    """Why ``head`` cannot go through :func:`chunked_head_objective` (``None``: it can)."""
    if _is_lora_linear(head):
        if type(head.base_layer) is not nn.Linear:
            return f"its LoRA wraps a {type(head.base_layer).__name__}, not nn.Linear"
        try:
            _lora_adapter(head)
        except ValueError as e:
            return f"the LM head is LoRA-adapted and {e}"
        if any(hasattr(p, "ds_id") for p in head.parameters()):
            return ("the LM head is LoRA-adapted under ZeRO-3, which gathers the base and adapter weights only "
                    "around their own submodules' calls")
        return None
    if type(head) is not nn.Linear:
        return f"the LM head is a {type(head).__name__}, not nn.Linear"
    return None


def head_tensors(head: nn.Module) -> Head:
    """The tensors of a head :func:`unchunkable` accepts, as they are *now* (gathered inside a sharded call)."""
    if _is_lora_linear(head):
        base = head_tensors(head.base_layer)
        name = _lora_adapter(head)
        if name is None:
            return base
        return Head(base.weight, base.bias, head.lora_A[name].weight, head.lora_B[name].weight,
                    float(head.scaling[name]), head.lora_dropout[name])
    w = head.weight
    if type(w) not in (nn.Parameter, torch.Tensor) or w.dim() != 2 or w.numel() == 0:
        raise RuntimeError(f"the LM head's weight is not whole here ({type(w).__name__} of shape {tuple(w.shape)}): "
                           "the chunked objective must run inside the head's call (call_as_forward)")
    return Head(w, head.bias)


def call_as_forward(module: nn.Module, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` run as ``module``'s forward, inside ``module.__call__``, so that a strategy's hooks on the
    module (ZeRO-3's gather before forward and before backward, gradient reduction after) surround it."""
    module.forward = fn  # an instance attribute shadows the class's forward for this one call
    try:
        return module(*args)
    finally:
        del module.forward


def chunked_sums(hidden: torch.Tensor, head: nn.Module, targets: torch.Tensor,
                 stats: Callable[[torch.Tensor, torch.Tensor], dict[str, torch.Tensor]], *,
                 chunk_size: Optional[int]) -> dict[str, torch.Tensor]:
    """``stats(logits, targets)`` summed over chunks of ``chunk_size`` rows (``None``: one chunk), no gradient.

    Held-out metrics need no gradient, so any head works: each chunk goes through the head class's own
    forward, inside one :func:`call_as_forward` (one gather of a ZeRO-3 head for all chunks)."""

    def forward(h: torch.Tensor) -> dict[str, torch.Tensor]:
        step = chunk_size or max(h.shape[0], 1)
        sums: dict[str, torch.Tensor] = {}
        for start in range(0, max(h.shape[0], 1), step):
            logits = type(head).forward(head, h[start:start + step]).float()
            for k, v in stats(logits, targets[start:start + step]).items():
                sums[k] = sums[k] + v if k in sums else v
        return sums

    with torch.no_grad():
        return call_as_forward(head, forward, hidden)


def compute_copy(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """``t`` detached, in autocast's dtype when autocast would cast it: once per step, not at every chunk.

    Autocast caches its cast of a weight only for a leaf that requires grad; a detached float32 weight (full
    fine-tuning's head, a LoRA head's adapter) would be cast again by every chunk's matmul -- at Qwen3's
    vocabulary a (151,936 x 2,048) copy per chunk. The values are the ones autocast computes with."""
    if t is None:
        return None
    t = t.detach()
    device = t.device.type
    if t.dtype == torch.float32 and torch.is_autocast_enabled(device):
        return t.to(torch.get_autocast_dtype(device))
    return t


@contextlib.contextmanager
def _tf32_matmuls(enabled: bool):
    """float32 matmuls on TF32 tensor cores while inside (CUDA only; restored after)."""
    if not enabled:
        yield
        return
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


class _ChunkedHead(torch.autograd.Function):
    """Forward returns the summed loss and the logged sums; the gradients are computed there too.

    Inputs: hidden ``(N, H)``, its dropped copy for the adapter (or ``None``), the weight, bias and
    the adapter's two factors (or ``None``); ``run`` computes ``(loss, grads in that order, sums)``.
    """

    @staticmethod
    def forward(ctx, run, hidden, dropped, weight, bias, lora_a, lora_b):
        with _tf32_matmuls(hidden.is_cuda):
            loss, grads, sums = run(hidden, dropped, weight, bias, lora_a, lora_b)
        ctx.save_for_backward(*grads)
        ctx.dtypes = [t.dtype if t is not None else None for t in (hidden, dropped, weight, bias, lora_a, lora_b)]
        ctx.mark_non_differentiable(*sums.values())
        return (loss, *sums.values())

    @staticmethod
    def backward(ctx, grad_loss, *unused):
        out = [None]  # run
        for need, g, dtype in zip(ctx.needs_input_grad[1:], ctx.saved_tensors, ctx.dtypes):
            # the parameters' gradients are accumulated in float32 and returned in their dtype
            out.append((g * grad_loss.to(g.dtype)).to(dtype) if need else None)
        return tuple(out)


def chunked_head_objective(hidden: torch.Tensor, head: Head, targets: torch.Tensor, objective: ChunkObjective, *,
                           chunk_size: int, teacher_hidden: Optional[torch.Tensor] = None,
                           teacher_head: Optional[Head] = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``objective`` over ``(N, H)`` hidden states through ``head``, ``chunk_size`` rows at a time.

    Equals ``objective(head(hidden), targets, teacher_logits)`` in value, sums and gradients (with
    respect to ``hidden`` and every tensor of ``head``) up to float32 summation order; never holds more
    than one chunk's ``(chunk_size, V)`` logits. ``teacher_hidden`` goes through ``teacher_head``
    (default: the student's head) under ``no_grad``; a teacher that is not a tensor (a cached teacher,
    :class:`~ifdistill.methods.distill.teacher_cache.CachedTargets`) is only sliced by chunk. A LoRA head's dropout is applied to all N rows at
    once, before chunking, so it draws the same random numbers as the unchunked module.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    teacher_head = teacher_head if teacher_head is not None else head
    lora = head.lora_a is not None
    dropped = None
    if lora:
        d_in = hidden.to(head.lora_a.dtype)
        dropped = head.dropout(d_in) if head.dropout is not None else d_in
    # a teacher already reduced to what the objective reads (a cached teacher): sliced, not run through a head
    precomputed = teacher_hidden is not None and not isinstance(teacher_hidden, torch.Tensor)
    shared = (teacher_hidden is not None and not precomputed and not lora and teacher_head.lora_a is None
              and teacher_head.weight is head.weight and teacher_head.bias is head.bias)
    names: list[str] = []  # the order of the sums, known once run() has seen the objective's output

    def zeros_like(t: Optional[torch.Tensor], dtype: Optional[torch.dtype] = torch.float32) -> torch.Tensor:
        if t is None or not t.requires_grad:
            return hidden.new_zeros(())
        return torch.zeros(t.shape, dtype=dtype or t.dtype, device=t.device)

    def run(h, d, w, b, a, bb):
        n = h.shape[0]
        grad_h, grad_d = zeros_like(h, None), zeros_like(d, None)
        grad_w, grad_b, grad_a, grad_bb = zeros_like(w), zeros_like(b), zeros_like(a), zeros_like(bb)
        w_, b_ = compute_copy(w), compute_copy(b)
        a_, bb_ = (compute_copy(a), compute_copy(bb)) if lora else (None, None)
        s = head.scaling
        loss = torch.zeros((), dtype=torch.float32, device=h.device)
        sums: dict[str, torch.Tensor] = {}
        for start in range(0, max(n, 1), chunk_size):
            rows = slice(start, start + chunk_size)
            h_c = h[rows].detach()
            d_c = d[rows].detach() if lora else None
            t_c = None
            if shared:  # the teacher reads the same weight: one pass over it for both sides
                both = nn.functional.linear(torch.cat([h_c, teacher_hidden[rows].to(h_c.dtype)]), w_, b_)
                base, t_c = both[:h_c.shape[0]], both[h_c.shape[0]:].float()
                del both
            else:
                if precomputed:
                    t_c = teacher_hidden[rows]
                elif teacher_hidden is not None:
                    with torch.no_grad():
                        t_c = teacher_head.logits(teacher_hidden[rows])
                base = nn.functional.linear(h_c, w_, b_)
            u_c = nn.functional.linear(d_c, a_) if lora else None
            with torch.enable_grad():
                logits = ((base + nn.functional.linear(u_c, bb_) * s).to(base.dtype) if lora else base).float()
                logits.requires_grad_(True)
                loss_c, stats_c = objective(logits, targets[rows], t_c)
                (g,) = torch.autograd.grad(loss_c, logits) if loss_c.requires_grad else (torch.zeros_like(logits),)
            del logits, base, t_c
            if h.requires_grad:
                grad_h[rows] = g.to(w_.dtype) @ w_
            if w.requires_grad:
                grad_w.addmm_(g.t(), h_c.float())
            if b is not None and b.requires_grad:
                grad_b += g.sum(0)
            if lora:
                gs = (g * s).to(bb.dtype)  # in the adapter's own dtype for its weight gradient below
                g_u = gs.to(bb_.dtype) @ bb_  # dL/du, (c, r)
                if d.requires_grad:
                    grad_d[rows] = g_u @ a_
                if a.requires_grad:
                    grad_a.addmm_(g_u.t().float(), d_c.float())
                if bb.requires_grad:
                    grad_bb.addmm_(gs.t().float(), u_c.float())
            loss += loss_c.detach().float()
            for k, v in stats_c.items():
                sums[k] = sums[k] + v.detach() if k in sums else v.detach().clone()
            del g
        names.extend(sums)
        return loss, (grad_h, grad_d, grad_w, grad_b, grad_a, grad_bb), sums

    loss, *values = _ChunkedHead.apply(run, hidden, dropped, head.weight, head.bias,
                                       head.lora_a if lora else None, head.lora_b if lora else None)
    return loss, dict(zip(names, values))
