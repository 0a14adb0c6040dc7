"""The cached objective (losses.cached_kd_with_stats) against the online one and against its own formula."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ifdistill.train.losses import IGNORE_INDEX, ce_kd_with_stats, cached_kd_with_stats, divergence
from ifdistill.methods.distill.teacher_pass import teacher_topk

N, V = 9, 53
# float32 throughout: each loss term is a sum of V products of O(1) numbers, rounded at ~6e-8 relative per
# operation; V = 53 terms and a few more operations keep the relative error of a sum under
# V * 6e-8 * 10 ~ 3e-5, so 1e-4 bounds it with room and still fails at any formula difference (>= 1e-2 here).
REL = 1e-4


def _inputs(seed: int = 0, sharp: float = 3.0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(N, V, generator=g) * 2
    t = torch.randn(N, V, generator=g) * sharp
    y = torch.randint(0, V, (N,), generator=g)
    y[2] = IGNORE_INDEX
    return s, t, y


def _grad(fn, s):
    s = s.clone().requires_grad_(True)
    loss = fn(s)
    (g,) = torch.autograd.grad(loss, s)
    return loss.detach(), g


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_k_equal_v_gives_the_online_loss_and_gradient(temperature):
    s, t, y = _inputs()
    ids, logp, tail = teacher_topk(t, V, temperature)
    assert torch.equal(tail, torch.zeros(N))

    def online(x):
        if temperature == 1.0:
            return ce_kd_with_stats(x, y, t, kd_ratio=0.3)[0]
        ce = F.cross_entropy(x, y, ignore_index=IGNORE_INDEX, reduction="sum")
        return 0.3 * divergence(x, t, y, temperature=temperature, reduction="sum") + 0.7 * ce

    lo, go = _grad(online, s)
    lc, gc = _grad(lambda x: cached_kd_with_stats(x, y, ids, logp, tail, kd_ratio=0.3, temperature=temperature)[0], s)
    assert lc.item() == pytest.approx(lo.item(), rel=REL)
    assert torch.allclose(gc, go, rtol=REL, atol=REL * go.abs().max().item())
    assert torch.equal(gc[2], torch.zeros(V))  # the ignored position counts for nothing


def _coarse_kl_reference(s, t, y, k, temperature, r):
    """The formula of the docstring, by plain autograd: KL between the two distributions on S + {R}."""
    keep = y != IGNORE_INDEX
    p = F.softmax(t / temperature, -1)
    q = F.softmax(s / temperature, -1)
    idx = p.topk(k, -1).indices
    p_s, q_s = p.gather(-1, idx), q.gather(-1, idx)
    p_r, q_r = 1 - p_s.sum(-1), 1 - q_s.sum(-1)
    kl = (p_s * (p_s.log() - q_s.log())).sum(-1) + p_r * (p_r.log() - q_r.log())
    ce = F.cross_entropy(s, y, ignore_index=IGNORE_INDEX, reduction="sum")
    return r * (kl * keep).sum() * temperature ** 2 + (1 - r) * ce


@pytest.mark.parametrize("k,temperature", [(1, 1.0), (5, 1.0), (20, 2.0)])
def test_closed_form_gradient_matches_autograd_of_the_formula(k, temperature):
    s, t, y = _inputs(1)
    ids, logp, tail = teacher_topk(t, k, temperature)
    lr, gr = _grad(lambda x: _coarse_kl_reference(x.double(), t.double(), y, k, temperature, 0.6), s)
    lc, gc = _grad(lambda x: cached_kd_with_stats(x, y, ids, logp, tail, kd_ratio=0.6, temperature=temperature)[0], s)
    # float32 against float64: the same REL bound as above
    assert lc.item() == pytest.approx(lr.item(), rel=REL)
    assert torch.allclose(gc, gr, rtol=REL, atol=REL * gr.abs().max().item())


def test_coarsened_kl_never_exceeds_the_full_kl_and_stats_add_up():
    s, t, y = _inputs(2)
    full = divergence(s, t, y, reduction="none")
    for k in (1, 4, 16, V):
        ids, logp, tail = teacher_topk(t, k)
        _, stats = cached_kd_with_stats(s, y, ids, logp, tail, kd_ratio=0.5)
        assert stats["kd"].item() <= full.sum().item() * (1 + REL)
        keep = y != IGNORE_INDEX
        assert stats["count"].item() == keep.sum().item()
        assert stats["teacher_mass"].item() == pytest.approx((1 - tail)[keep].sum().item(), rel=1e-6)
        assert stats["teacher_correct"].item() == ((t.argmax(-1) == y) & keep).sum().item()
