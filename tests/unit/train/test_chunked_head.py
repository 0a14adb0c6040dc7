"""The chunked LM head + objective equals the unchunked path in loss, logged sums and gradients."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch import nn

from ifdistill.train.chunked_head import chunked_head_objective, plain_head
from ifdistill.train.distill_module import ICLDistillModule
from ifdistill.train.losses import ce_kd_with_stats, divergence, token_stats
from ifdistill.train.sft_module import SFTModule

from tests.unit.train.conftest import LORA, TINY, k0_items, perturb_lora

QWEN3_VOCAB = 151_936
KINDS = [dict(kind="forward", temperature=1.0, topk=None), dict(kind="reverse", temperature=1.0, topk=None),
         dict(kind="jsd", temperature=1.0, topk=None), dict(kind="forward", temperature=2.0, topk=None),
         dict(kind="forward", temperature=1.0, topk=8)]


def sft_loss(s, y, t):
    return ce_kd_with_stats(s, y)


def kd_loss(s, y, t, *, kind, temperature, topk, r=0.5):
    if kind == "forward" and temperature == 1.0 and topk is None:
        return ce_kd_with_stats(s, y, t, kd_ratio=r)
    ce, stats = ce_kd_with_stats(s, y)
    kd = divergence(s, t, y, kind=kind, temperature=temperature, topk=topk, reduction="sum")
    stats.update({"kd": kd.detach(), **{"teacher_" + k: v for k, v in token_stats(t, y).items()}})
    return r * kd + (1 - r) * ce, stats


def reference(hidden, weight, targets, loss_fn, t_hidden=None):
    h = hidden.detach().clone().requires_grad_(True)
    w = weight.detach().clone().requires_grad_(True)
    t = nn.functional.linear(t_hidden, weight).float() if t_hidden is not None else None
    loss, stats = loss_fn(nn.functional.linear(h, w).float(), targets, t)
    loss.backward()
    return loss.detach(), stats, h.grad, w.grad


def chunked(hidden, weight, targets, loss_fn, chunk, t_hidden=None):
    h = hidden.detach().clone().requires_grad_(True)
    w = weight.detach().clone().requires_grad_(True)
    loss, stats = chunked_head_objective(h, w, None, targets, loss_fn, chunk_size=chunk, teacher_hidden=t_hidden)
    loss.backward()
    return loss.detach(), stats, h.grad, w.grad


def assert_close(a, b, n_tokens):
    # float32 sums over N tokens (and, for the weight gradient, N outer products) in another order: the
    # relative difference is bounded by ~N * eps32 = N * 1.2e-7 in the worst case; N <= 64 here, so 1e-5
    # holds with margin while a missing chunk, a wrong scale or a dropped token changes values by >= 1e-2.
    tol = max(1e-5, 2 * n_tokens * 1.2e-7)
    assert torch.allclose(a, b, rtol=tol, atol=tol * (b.abs().max().item() + 1e-12)), (a - b).abs().max()


@pytest.mark.parametrize("vocab,chunk", [(97, 1), (97, 7), (97, 1000), (QWEN3_VOCAB, 13)])
@pytest.mark.parametrize("spec", [None, *KINDS], ids=lambda s: "sft" if s is None else "-".join(map(str, s.values())))
def test_chunked_equals_unchunked(vocab, chunk, spec):
    g = torch.Generator().manual_seed(vocab + chunk)
    n, hdim = 40, 32
    hidden, t_hidden = torch.randn(n, hdim, generator=g), torch.randn(n, hdim, generator=g)
    weight = torch.randn(vocab, hdim, generator=g) * 0.3
    targets = torch.randint(0, vocab, (n,), generator=g)
    targets[::5] = -100  # ignored positions count for nothing in both paths
    loss_fn = sft_loss if spec is None else functools.partial(kd_loss, **spec)
    th = None if spec is None else t_hidden
    ref = reference(hidden, weight, targets, loss_fn, th)
    got = chunked(hidden, weight, targets, loss_fn, chunk, th)
    assert_close(got[0], ref[0], n)
    assert set(got[1]) == set(ref[1])
    for key in ref[1]:
        assert_close(got[1][key], ref[1][key].detach(), n)
    assert_close(got[2], ref[2], n)
    assert_close(got[3], ref[3], n)


def grads(module):
    return {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def run(module, batch):
    module.zero_grad(set_to_none=True)
    loss, stats = module.objective(batch)
    loss.backward()
    return loss.detach(), stats, grads(module)


@pytest.mark.parametrize("peft", [LORA, {"method": "none"}], ids=["lora", "full"])
def test_sft_module_chunked_equals_unchunked(peft, icl_items):
    from ifdistill.data.collate import PadCollator

    batch = PadCollator(0)(icl_items)
    torch.manual_seed(0)
    plain = SFTModule(TINY, peft, logit_chunk_size=None)
    perturb_lora(plain)
    chunky = copy.deepcopy(plain)
    chunky.logit_chunk_size = 5
    a, b = run(plain, batch), run(chunky, batch)
    n = int(a[1]["count"])
    assert_close(b[0], a[0], n)
    for key in a[1]:
        assert_close(b[1][key], a[1][key], n)
    assert set(a[2]) == set(b[2]) and a[2]  # full fine-tuning: the tied embedding gets both gradients
    for name in a[2]:
        assert_close(b[2][name], a[2][name], n)


@pytest.mark.parametrize("spec", KINDS, ids=lambda s: "-".join(map(str, s.values())))
def test_distill_module_chunked_equals_unchunked(spec, icl_items):
    from ifdistill.data.collate import IclCollator

    batch = IclCollator(0)(icl_items)
    torch.manual_seed(0)
    plain = ICLDistillModule(TINY, LORA, kl=spec["kind"], temperature=spec["temperature"], topk=spec["topk"])
    perturb_lora(plain)
    chunky = copy.deepcopy(plain)
    chunky.logit_chunk_size = 6
    a, b = run(plain, batch), run(chunky, batch)
    n = int(a[1]["count"])
    for key in a[1]:
        assert_close(b[1][key], a[1][key], n)
    for name in a[2]:
        assert_close(b[2][name], a[2][name], n)


def test_an_adapted_lm_head_falls_back_to_the_unchunked_path(icl_items):
    from ifdistill.data.collate import PadCollator

    module = SFTModule(TINY, {**LORA, "target_modules": ["q_proj", "lm_head"]}, logit_chunk_size=4)
    assert plain_head(module.lm.output_head()) is None
    with pytest.warns(UserWarning, match="unchunked"):
        loss, _ = module.objective(PadCollator(0)(k0_items(icl_items)))
    assert torch.isfinite(loss)
