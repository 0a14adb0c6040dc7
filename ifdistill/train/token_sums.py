"""Token-weighted metric aggregation across micro-batches and ranks.

Every training/validation metric in ifdistill is a ratio of two sums over supervised tokens
(``nll / count``, ``correct / count``, ...). :class:`TokenSums` keeps those sums on the model's device,
in float64 so that thousands of micro-batches add up without drift, and reduces them across ranks
with a single all-reduce of one stacked tensor -- so a rank that saw 3 tokens weighs 3 tokens, never
"one batch". The set of keys is fixed at construction: every rank must all-reduce the same vector,
even a rank whose shard had no supervised token at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch

Reducer = Callable[[torch.Tensor], torch.Tensor]


class TokenSums:
    """Named running sums; ``add`` accumulates, ``reduce`` sums over ranks and resets."""

    def __init__(self, keys: Iterable[str]):
        self.keys = tuple(keys)
        self._values: torch.Tensor | None = None

    def _buffer(self, device: torch.device) -> torch.Tensor:
        if self._values is None or self._values.device != device:
            self._values = torch.zeros(len(self.keys), dtype=torch.float64, device=device)
        return self._values

    def add(self, values: Mapping[str, torch.Tensor | float], prefix: str = "") -> None:
        device = next((v.device for v in values.values() if isinstance(v, torch.Tensor)), torch.device("cpu"))
        buf = self._buffer(self._values.device if self._values is not None else device)
        for name, value in values.items():
            key = prefix + name
            if key not in self.keys:
                raise KeyError(f"{key!r} is not one of the aggregated keys {self.keys}")
            v = value.detach().to(buf.device, torch.float64) if isinstance(value, torch.Tensor) else float(value)
            buf[self.keys.index(key)] += v

    def reduce(self, all_reduce_sum: Reducer | None = None, device: torch.device | None = None) -> dict[str, float]:
        """Sum over ranks (``all_reduce_sum`` sums a tensor over ranks; ``None`` = one process), then reset."""
        buf = self._buffer(device or (self._values.device if self._values is not None else torch.device("cpu")))
        total = all_reduce_sum(buf.clone()) if all_reduce_sum is not None else buf
        out = dict(zip(self.keys, total.tolist()))
        self._values = None
        return out


def ratio(sums: Mapping[str, float], numerator: str, denominator: str) -> float:
    """``sums[numerator] / sums[denominator]``, NaN when nothing was counted (never a silent 0)."""
    d = sums[denominator]
    return sums[numerator] / d if d > 0 else float("nan")


def token_metrics(sums: Mapping[str, float], prefix: str = "") -> dict[str, float]:
    """Teacher-forced CE, top-1 accuracy and entropy from ``nll``/``correct``/``entropy``/``count`` sums."""
    return {
        "ce": ratio(sums, prefix + "nll", prefix + "count"),
        "acc": ratio(sums, prefix + "correct", prefix + "count"),
        "entropy": ratio(sums, prefix + "entropy", prefix + "count"),
        "tokens": sums[prefix + "count"],
    }
