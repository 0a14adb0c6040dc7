"""What one training step costs: its model FLOPs (the MFU numerator) and where its time goes (profiler).

Used by ``bench/bench_gpu.py``; the formula and the meaning of each number are in its module docstring.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping


def step_flops(module, batch: Mapping[str, Any], *, c: int) -> float:
    """Model FLOPs of one training step on a packed ``batch`` (the formula: ``bench/bench_gpu.py``'s docstring; ``c`` 6 or 4)."""
    from ifdistill.train.modeling import base_causal_lm

    lm = base_causal_lm(module.model)
    cfg = lm.config
    body = sum(p.numel() for n, p in lm.named_parameters()
               if "embed_tokens" not in n and "lm_head" not in n and "lora_" not in n)
    lora = sum(p.numel() for n, p in module.model.named_parameters() if "lora_" in n)
    seq = batch["seq_idx"][batch["seq_idx"] >= 0]
    tokens = int(seq.numel())
    docs = [int(n) for n in seq.unique(return_counts=True)[1]]
    supervised = int((batch["labels"] != -100).sum())
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    attention = 6 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * sum(n * n for n in docs)
    return float(c * body * tokens + c * cfg.vocab_size * cfg.hidden_size * supervised + 6 * lora * tokens + attention)


def union_length(spans: Iterable[tuple[float, float]]) -> float:
    """The length of the union of ``[start, end)`` spans: time covered by at least one of them, once."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def device_busy_seconds(events: Iterable[Any]) -> float:
    """Seconds in which the device ran at least one kernel or copy: the union of the device events'
    intervals. Summing the operators' device times instead counts each kernel under its operator and
    again as itself, and a user annotation (``Optimizer.step#AdamW.step``) a third time; kernels that
    overlap on several streams count once."""
    from torch.autograd import DeviceType

    return union_length((e.time_range.start, e.time_range.end) for e in events
                        if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)) / 1e6


def profile_step(step: Callable[[], Any], device: str) -> dict[str, Any]:
    """``step()`` under ``torch.profiler``: host busy, device busy and wall seconds, and the top operators."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    sync()
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        step()
        sync()
        wall = time.perf_counter() - t0
    events = prof.key_averages()

    def device_us(e) -> float:
        return float(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0)) or 0.0)

    host = sum(e.self_cpu_time_total for e in events) / 1e6
    busy = device_busy_seconds(prof.events()) if cuda else None
    top = sorted(events, key=device_us if cuda else (lambda e: e.self_cpu_time_total), reverse=True)[:8]
    return {"wall_s": wall, "host_busy_s": host, "device_busy_s": busy,
            "device_busy_share": busy / wall if busy is not None and wall > 0 else None,
            "top_ops": [{"name": e.key, "calls": e.count, "host_ms": e.self_cpu_time_total / 1e3,
                         "device_ms": device_us(e) / 1e3 if cuda else None} for e in top]}
