"""Metrics aggregate as sums over tokens across micro-batches and ranks, never as a mean of means."""

from __future__ import annotations

import math

import pytest
import torch

from ifdistill.train.token_sums import TokenSums, token_metrics


def test_sums_over_micro_batches_weight_tokens_not_batches():
    sums = TokenSums(("nll", "correct", "entropy", "count"))
    sums.add({"nll": torch.tensor(30.0), "correct": torch.tensor(3.0), "entropy": torch.tensor(6.0), "count": torch.tensor(3.0)})
    sums.add({"nll": torch.tensor(100.0), "correct": torch.tensor(100.0), "entropy": torch.tensor(0.0),
              "count": torch.tensor(100.0)})
    m = token_metrics(sums.reduce())
    assert m["ce"] == pytest.approx(130 / 103)  # a mean of means would say (10 + 1) / 2
    assert m["acc"] == pytest.approx(103 / 103)
    assert m["tokens"] == 103


def test_reduce_across_ranks_sums_then_resets():
    a, b = TokenSums(("nll", "count")), TokenSums(("nll", "count"))
    a.add({"nll": torch.tensor(2.0), "count": torch.tensor(1.0)})
    b.add({"nll": torch.tensor(9.0), "count": torch.tensor(9.0)})
    other = b.reduce()  # what rank 1 contributes
    out = a.reduce(lambda t: t + torch.tensor([other["nll"], other["count"]], dtype=t.dtype))
    assert out == {"nll": 11.0, "count": 10.0}
    assert a.reduce() == {"nll": 0.0, "count": 0.0}  # reset after reduce


def test_fixed_keys_and_nan_when_nothing_counted():
    sums = TokenSums(("nll", "correct", "entropy", "count"))
    with pytest.raises(KeyError):
        sums.add({"bogus": 1.0})
    assert math.isnan(token_metrics(sums.reduce())["ce"])
