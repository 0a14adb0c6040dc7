"""Padding-free attention for packed rows: the sequence boundaries reach the attention kernel.

A packed row holds many examples back to back (:class:`~ifdistill.data.collate.PackCollator`). With
``position_ids`` alone, transformers derives a dense block-diagonal ``(L, L)`` mask from the position
restarts and SDPA computes the whole square with it: at 4,096 tokens of ~120-token examples about 1.5 %
of that square is needed, and a dense mask also keeps SDPA off its flash kernel. Here the rows are
flattened to one sequence of ``T`` tokens and the boundaries travel as ``cu_seq_lens_q/k`` (cumulative
lengths, the flash-attention convention) to the attention function of every layer, which then attends
within each example only:

- ``flash_attention_2/3`` (the ``flash-attn`` package, when installed): transformers' own varlen path;
- :data:`PACKED_SDPA` (registered here with transformers' attention and mask interfaces): on CUDA
  PyTorch's varlen flash kernel (``torch.nn.attention.varlen.varlen_attn``, torch >= 2.10), elsewhere
  one causal SDPA call per example (``is_causal=True``: the fused kernel skips the blocks above the
  diagonal). Batches that are not packed (padded rows: validation, distillation) go through
  transformers' ``sdpa`` unchanged, with its padding mask.

``sdpa`` and ``eager`` stay available for packed rows the old way (the dense mask from the position
restarts). :func:`default_attn_implementation` picks the implementation for ``model.attn_implementation:
auto``: ``flash_attention_2`` where ``flash-attn`` imports on a CUDA machine, else :data:`PACKED_SDPA` on
CUDA, ``sdpa`` on CPU (where a dense mask over a few hundred tokens costs less than the per-example calls).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Optional

import torch

from ifdistill.data.collate import PACKED_SDPA, VARLEN_IMPLEMENTATIONS

AUTO = "auto"


def passes_boundaries(attn_implementation: Optional[str]) -> bool:
    """Whether an implementation reads ``cu_seq_lens`` (packed rows go to it flattened, without a mask)."""
    return attn_implementation in VARLEN_IMPLEMENTATIONS


def default_attn_implementation(cuda: Optional[bool] = None) -> str:
    """What ``model.attn_implementation: auto`` means on this machine (module docstring)."""
    cuda = torch.cuda.is_available() if cuda is None else cuda
    if not cuda:
        return "sdpa"
    from transformers.utils import is_flash_attn_2_available

    return "flash_attention_2" if is_flash_attn_2_available() else PACKED_SDPA


def resolve_attn_implementation(name: Optional[str]) -> str:
    """``auto``/``None`` -> :func:`default_attn_implementation`; :data:`PACKED_SDPA` registered before use."""
    name = default_attn_implementation() if name in (None, AUTO) else str(name)
    if name == PACKED_SDPA:
        register()
    return name


@functools.lru_cache(maxsize=1)
def _varlen_kernel():
    """``(varlen_attn, causal keyword arguments)`` of this torch, or ``None`` where it has none. Its
    keywords changed between releases (``is_causal``, later a ``window_size``; ``scale`` added), so they
    are read from the signature; without ``scale`` the kernel's default ``1/sqrt(head_dim)`` is passed as
    nothing and the caller checks the model wants that scale."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    if "window_size" in params:  # causal: the window is everything to the left, nothing to the right
        causal: dict[str, Any] = {"window_size": (-1, 0)}
    elif "is_causal" in params:
        causal = {"is_causal": True}
    else:
        return None
    return varlen_attn, causal, "scale" in params, "enable_gqa" in params


def varlen_dtype(query: torch.Tensor) -> Optional[torch.dtype]:
    """The half precision the varlen kernel computes ``query``'s attention in, or ``None`` where it cannot.

    The flash kernel takes only float16/bfloat16. Under autocast the attention runs in autocast's dtype,
    as autocast does for ``scaled_dot_product_attention`` (the query may arrive in float32: a float32
    RMSNorm weight of full fine-tuning's master weights, as in Qwen3's ``q_norm``, keeps it there);
    outside autocast a float32 query has no varlen kernel and goes through the per-example SDPA calls."""
    device = query.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
    else:
        dtype = query.dtype
    return dtype if dtype in (torch.float16, torch.bfloat16) else None


def _repeat_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """``(1, kv_heads, T, D)`` -> ``(1, heads, T, D)`` (grouped-query attention's key/value sharing)."""
    return t if t.shape[1] == heads else t.repeat_interleave(heads // t.shape[1], dim=1)


def packed_sdpa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                          attention_mask: Optional[torch.Tensor], dropout: float = 0.0,
                          scaling: Optional[float] = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``(B, H, L, D)`` in, ``((B, L, H, D), None)`` out."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:  # not a packed batch: plain SDPA with whatever mask transformers built
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    if query.shape[0] != 1:
        raise ValueError(f"packed attention takes one flattened row, got a batch of {query.shape[0]}")
    heads = query.shape[1]
    dtype = varlen_dtype(query)
    kernel = _varlen_kernel() if query.is_cuda and dropout == 0.0 and dtype is not None else None
    default_scale = scaling is None or abs(scaling - query.shape[-1] ** -0.5) < 1e-12
    if kernel is not None and (kernel[2] or default_scale):
        varlen_attn, causal, takes_scale, takes_gqa = kernel
        if not takes_gqa:
            key, value = _repeat_heads(key, heads), _repeat_heads(value, heads)
        max_len = int(kwargs.get("max_length_q"))
        q, k, v = (t[0].transpose(0, 1).to(dtype).contiguous() for t in (query, key, value))  # (T, H, D)
        extra = {"scale": scaling} if takes_scale else {}
        if takes_gqa and k.shape[1] != heads:
            extra["enable_gqa"] = True
        out = varlen_attn(q, k, v, cu, cu, max_len, max_len, **extra, **causal)
        return out.unsqueeze(0), None
    bounds = cu.tolist()  # free on CPU; on CUDA only without the varlen kernel (torch < 2.10): a sync per layer
    outs = []  # sdpa_attention_forward shares the key/value heads itself (grouped-query attention)
    for start, end in zip(bounds[:-1], bounds[1:]):
        seg = slice(start, end)
        out, _ = sdpa_attention_forward(module, query[:, :, seg], key[:, :, seg], value[:, :, seg], None,
                                        dropout=dropout, scaling=scaling, is_causal=True)
        outs.append(out)
    return torch.cat(outs, dim=1), None


@functools.lru_cache(maxsize=1)
def register() -> None:
    """Make :data:`PACKED_SDPA` a transformers attention implementation (its mask: SDPA's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
    AttentionMaskInterface.register(PACKED_SDPA, sdpa_mask)
