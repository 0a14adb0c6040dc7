"""The chunked LM head + objective equals the unchunked path in loss, logged sums and gradients."""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from ifdistill.train.chunked_head import Head, chunked_head_objective, unchunkable
from ifdistill.methods.distill.module import ICLDistillModule
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.train.losses import ce_kd_with_stats, divergence, token_stats
from ifdistill.methods.sft.module import UNCHUNKED_WARNING, SFTModule
from ifdistill.train.method import TrainingInputs

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


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def make_head(w, lora):
    """A Head over fresh leaves; ``lora``: ``(A, B)`` factors with scaling 2 (no dropout)."""
    if lora is None:
        (w,) = leaves(w)
        return Head(w), [w]
    w, a, b = leaves(w, *lora)
    return Head(w, lora_a=a, lora_b=b, scaling=2.0), [w, a, b]


def reference(hidden, weight, targets, loss_fn, t_hidden=None, lora=None):
    """The unchunked path: the head over all N rows by autograd."""
    (h,) = leaves(hidden)
    head, params = make_head(weight, lora)
    t = head.base().logits(t_hidden).detach() if t_hidden is not None else None
    loss, stats = loss_fn(head.logits(h), targets, t)
    loss.backward()
    return loss.detach(), stats, h.grad, [p.grad for p in params]


def chunked(hidden, weight, targets, loss_fn, chunk, t_hidden=None, lora=None):
    (h,) = leaves(hidden)
    head, params = make_head(weight, lora)
    loss, stats = chunked_head_objective(h, head, targets, loss_fn, chunk_size=chunk, teacher_hidden=t_hidden,
                                         teacher_head=head.base())
    loss.backward()
    return loss.detach(), stats, h.grad, [p.grad for p in params]


def assert_close(a, b, n_tokens):
    # float32 sums over N tokens (and, for the weight gradient, N outer products) in another order: the
    # relative difference is bounded by ~N * eps32 = N * 1.2e-7 in the worst case; N <= 64 here, so 1e-5
    # holds with margin while a missing chunk, a wrong scale or a dropped token changes values by >= 1e-2.
    tol = max(1e-5, 2 * n_tokens * 1.2e-7)
    assert torch.allclose(a, b, rtol=tol, atol=tol * (b.abs().max().item() + 1e-12)), (a - b).abs().max()


@pytest.mark.parametrize("vocab,chunk,lora", [(97, 1, False), (97, 7, False), (97, 1000, False), (97, 7, True),
                                             (QWEN3_VOCAB, 13, False), (QWEN3_VOCAB, 13, True)])
@pytest.mark.parametrize("spec", [None, *KINDS], ids=lambda s: "sft" if s is None else "-".join(map(str, s.values())))
def test_chunked_equals_unchunked(vocab, chunk, lora, spec):
    g = torch.Generator().manual_seed(vocab + chunk)
    n, hdim, r = 40, 32, 4
    hidden, t_hidden = torch.randn(n, hdim, generator=g), torch.randn(n, hdim, generator=g)
    weight = torch.randn(vocab, hdim, generator=g) * 0.3
    factors = (torch.randn(r, hdim, generator=g) * 0.3, torch.randn(vocab, r, generator=g) * 0.3) if lora else None
    targets = torch.randint(0, vocab, (n,), generator=g)
    targets[::5] = -100  # ignored positions count for nothing in both paths
    loss_fn = sft_loss if spec is None else functools.partial(kd_loss, **spec)
    th = None if spec is None else t_hidden
    ref = reference(hidden, weight, targets, loss_fn, th, factors)
    got = chunked(hidden, weight, targets, loss_fn, chunk, th, factors)
    assert_close(got[0], ref[0], n)
    assert set(got[1]) == set(ref[1])
    for key in ref[1]:
        assert_close(got[1][key], ref[1][key].detach(), n)
    assert_close(got[2], ref[2], n)  # the hidden states' gradient
    for a, b in zip(got[3], ref[3], strict=True):  # the head's weight (and the adapter's A and B)
        assert_close(a, b, n)


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
    plain = SFTModule(TrainingInputs(TINY, peft, logit_chunk_size=None))
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
    plain = ICLDistillModule(TrainingInputs(TINY, LORA),
                             DistillSettings(kl=spec["kind"], temperature=spec["temperature"], topk=spec["topk"]))
    perturb_lora(plain)
    chunky = copy.deepcopy(plain)
    chunky.logit_chunk_size = 6
    a, b = run(plain, batch), run(chunky, batch)
    n = int(a[1]["count"])
    for key in a[1]:
        assert_close(b[1][key], a[1][key], n)
    for name in a[2]:
        assert_close(b[2][name], a[2][name], n)


LORA_HEAD = {**LORA, "target_modules": ["q_proj", "lm_head"], "dropout": 0.1}


def compare_modules(module, batch, chunk):
    """The module unchunked, then with ``chunk``: loss, every logged sum and every parameter's gradient.

    Both runs start from the same RNG state, so dropout (in the adapters, the head's included) draws the
    same masks: the chunked path applies the head adapter's dropout to all rows at once, as PEFT does."""
    module.logit_chunk_size = None
    torch.manual_seed(1)
    a = run(module, batch)
    module.logit_chunk_size = chunk
    torch.manual_seed(1)
    b = run(module, batch)
    assert not module._warned_unchunked  # the chunked path ran
    n = int(a[1]["count"])
    assert_close(b[0], a[0], n)
    assert set(a[1]) == set(b[1])
    for key in a[1]:
        assert_close(b[1][key], a[1][key], n)
    assert set(a[2]) == set(b[2]) and a[2]
    for name in a[2]:
        assert_close(b[2][name], a[2][name], n)
    return a


def test_sft_with_a_lora_adapted_tied_lm_head_is_chunked(icl_items):
    from ifdistill.data.collate import PadCollator

    torch.manual_seed(0)
    module = SFTModule(TrainingInputs(TINY, LORA_HEAD, logit_chunk_size=None))
    perturb_lora(module)
    assert unchunkable(module.lm.output_head()) is None
    assert module.model.config.tie_word_embeddings
    _, _, g = compare_modules(module, PadCollator(0)(icl_items), 5)
    assert any("lm_head.lora_A" in k for k in g) and any("lm_head.lora_B" in k for k in g)


@pytest.mark.parametrize("teacher", ["frozen_initial", "self_stopgrad"])
def test_distill_with_a_lora_adapted_lm_head_is_chunked(teacher, icl_items):
    """The teacher's head is the student's without its adapter (frozen_initial) or with it (self_stopgrad)."""
    from ifdistill.data.collate import IclCollator

    torch.manual_seed(0)
    module = ICLDistillModule(TrainingInputs(TINY, LORA_HEAD), DistillSettings(teacher=teacher))
    perturb_lora(module)
    compare_modules(module, IclCollator(0)(icl_items), 6)


def test_gradient_checkpointing_with_the_chunked_head(icl_items):
    from ifdistill.data.collate import PadCollator

    torch.manual_seed(0)
    module = SFTModule(TrainingInputs(TINY, LORA, gradient_checkpointing=True))
    perturb_lora(module)
    compare_modules(module, PadCollator(0)(icl_items), 5)


def test_a_head_that_cannot_be_chunked_falls_back_with_its_reason(icl_items):
    from ifdistill.data.collate import PadCollator

    module = SFTModule(TrainingInputs(TINY, LORA, logit_chunk_size=4))
    base = module.model.get_base_model()
    base.lm_head = torch.nn.Sequential(base.lm_head)  # stands for any head the chunked path does not know
    assert "Sequential" in unchunkable(module.lm.output_head())
    with pytest.warns(UserWarning, match=UNCHUNKED_WARNING):
        loss, _ = module.objective(PadCollator(0)(k0_items(icl_items)))
    assert torch.isfinite(loss)


# -- Qwen3's vocabulary (151,936) on the embedded tiny_qwen3: short sequences, few tokens ----------------

QWEN3 = {"name_or_path": "builtin:tiny_qwen3", "enable_thinking": False}


@pytest.fixture(scope="module")
def qwen3_items(qwen3_tokenizer):
    """Two synthetic examples in Qwen3's template with a 1-shot teacher view (~100 completion tokens)."""
    from ifdistill.data.build import build_train_dataset

    from tests.unit.train.conftest import resolved, synthetic_data

    built = build_train_dataset(resolved(synthetic_data(8), k=1, demos="per_example", model=QWEN3), qwen3_tokenizer)
    return built.train.items[:2]


@pytest.fixture(scope="module")
def qwen3_distill(tiny_qwen3_dir):
    torch.manual_seed(0)
    module = ICLDistillModule(TrainingInputs(QWEN3,
                                             LORA_HEAD))  # the tied head carries an adapter: its gradients are compared
    perturb_lora(module)
    return module


@pytest.mark.parametrize("spec", KINDS, ids=lambda s: "-".join(map(str, s.values())))
def test_qwen3_vocabulary_distill_chunked_equals_unchunked(spec, qwen3_distill, qwen3_items):
    from ifdistill.data.collate import IclCollator

    qwen3_distill.kd.update(spec)
    qwen3_distill._warned_unchunked = False
    _, stats, g = compare_modules(qwen3_distill, IclCollator(0)(qwen3_items), 16)
    assert stats["count"] > 16  # several chunks
    assert any("lm_head.lora_B" in k for k in g)


def test_qwen3_vocabulary_sft_full_fine_tuning_chunked_equals_unchunked(tiny_qwen3_dir, qwen3_items):
    from ifdistill.data.collate import PadCollator

    module = SFTModule(TrainingInputs(QWEN3, {"method": "none"}))
    _, _, g = compare_modules(module, PadCollator(0)(k0_items(qwen3_items)), 16)
    assert "lm.model.model.embed_tokens.weight" in g  # the tied head's weight


def test_held_out_sums_chunked_equal_unchunked(icl_items):
    from ifdistill.data.collate import PadCollator

    batch = PadCollator(0)(icl_items)
    module = SFTModule(TrainingInputs(TINY, LORA_HEAD, val_names=["a", "b"]))
    perturb_lora(module)
    module.eval()
    for idx, chunk in enumerate((None, 5)):
        module.logit_chunk_size = chunk
        with torch.no_grad():
            module.validation_step(batch, 0, idx)
    a, b = module.val_sums["a"].reduce(), module.val_sums["b"].reduce()
    assert a["count"] == b["count"] > 5
    for key in a:  # float32 sums over the held-out tokens in chunks of 5 instead of at once
        assert b[key] == pytest.approx(a[key], rel=max(1e-5, 2 * a["count"] * 1.2e-7)), key


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_under_autocast_the_float32_head_is_cast_once_per_step_with_the_same_results(lora, monkeypatch):
    """Autocast caches its casts only of leaves that require grad; the objective reads the head's weights
    detached, so each chunk's matmul would cast the float32 weight again. ``compute_copy`` casts it once: the
    same bf16 operands, so the results are bit for bit those of the per-chunk casts, with chunks - 1 fewer
    weight-sized casts."""
    from torch.profiler import ProfilerActivity, profile

    import ifdistill.train.chunked_head as ch

    g = torch.Generator().manual_seed(0)
    n, hidden, vocab, chunk = 48, 16, 64, 8
    h, w = torch.randn(n, hidden, generator=g), torch.randn(vocab, hidden, generator=g) * 0.1
    factors = (torch.randn(4, hidden, generator=g) * 0.1, torch.randn(vocab, 4, generator=g) * 0.1) if lora else None
    y = torch.randint(0, vocab, (n,), generator=g)

    def run():
        (hh,) = leaves(h)
        head, params = make_head(w, factors)
        with torch.autocast("cpu", dtype=torch.bfloat16), profile(activities=[ProfilerActivity.CPU],
                                                                 record_shapes=True) as prof:
            loss, _ = chunked_head_objective(hh, head, y, sft_loss, chunk_size=chunk)
        loss.backward()
        casts = sum(1 for e in prof.events() if e.name == "aten::_to_copy" and list(e.input_shapes[0]) == [vocab, hidden])
        return loss.detach(), [hh.grad, *(p.grad for p in params)], casts

    loss, grads, casts = run()
    monkeypatch.setattr(ch, "compute_copy", lambda t: None if t is None else t.detach())  # the per-chunk casts
    loss_0, grads_0, casts_0 = run()
    assert torch.equal(loss, loss_0) and all(torch.equal(a, b) for a, b in zip(grads, grads_0))
    assert casts == 1 and casts_0 >= n // chunk  # once per step, instead of once (or twice) per chunk
