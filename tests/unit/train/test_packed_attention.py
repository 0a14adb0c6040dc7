"""Packed rows train exactly like the same examples one at a time, for every attention implementation on CPU.

Packing changes the layout of a micro-batch (examples back to back in rows, position ids restarting),
never what the loss sees: the summed loss and every parameter's gradient of a packed micro-batch equal
the sums over its examples run alone, unpadded. ``packed_sdpa`` must get there without a ``(T, T)``
mask: every SDPA call it makes is causal, maskless and no longer than one example.
"""

from __future__ import annotations

import math

import pytest
import torch

from ifdistill.data.collate import PackCollator, PadCollator
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train.method import TrainingInputs
from tests.support import sum_relative_error
from tests.unit.train.conftest import TINY, resolved, synthetic_data

FULL = {"method": "none"}  # every weight gets a gradient: the embeddings, each layer, the head
IMPLEMENTATIONS = ("sdpa", "eager", "packed_sdpa")


@pytest.fixture(scope="module")
def items(tiny_tokenizer):
    from ifdistill.data.build import build_train_dataset

    return build_train_dataset(resolved(synthetic_data(24)), tiny_tokenizer).train.items[:4]


def _loss_and_grads(module: SFTModule, batches) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    module.zero_grad(set_to_none=True)
    total = torch.zeros(())
    for batch in batches:
        loss, _ = module.objective(batch)
        loss.backward()
        total += loss.detach()
    return total, {n: p.grad.clone() for n, p in module.lm.named_parameters() if p.grad is not None}


def _module(impl: str) -> SFTModule:
    torch.manual_seed(0)
    return SFTModule(TrainingInputs(TINY, FULL,
                                    attn_implementation=impl)).eval()  # eval: no dropout, the same function twice


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_packed_rows_give_the_per_example_loss_and_gradients(items, tiny_tokenizer, impl, monkeypatch):
    pad = tiny_tokenizer.pad_token_id
    module = _module(impl)
    lengths = [len(it["input_ids"]) for it in items]
    ref_loss, ref_grads = _loss_and_grads(module, [PadCollator(pad)([it]) for it in items])
    cap = max(lengths) + min(lengths)  # several rows, some with padding at the end
    packed = PackCollator(pad, max_row_tokens=cap)(items)
    assert packed["input_ids"].shape[0] > 1 and bool((packed["seq_idx"] < 0).any())

    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, *args, **kwargs):
        calls.append((q.shape[-2], attn_mask is None, kwargs.get("is_causal", False)))
        return sdpa(q, k, v, attn_mask, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    loss, grads = _loss_and_grads(module, [packed])
    monkeypatch.undo()
    if impl == "packed_sdpa":  # one causal, maskless call per example (and per row padding) in every layer
        segments = torch.diff(packed["cu_seqlens"]).tolist()
        assert calls and all(no_mask and causal for _, no_mask, causal in calls)
        assert sorted(n for n, _, _ in calls) == sorted(segments * module.model.config.num_hidden_layers)

    # Equal in exact arithmetic; in float32 the two differ by summation order only: per layer the
    # attention sums over <= L keys and the projections over ~4H inputs, and each gradient sums over
    # the T tokens. Bound: the probabilistic relative error of a sum of n = T * layers * (L + 4H) terms
    # (tests.support.sum_relative_error), relative to the largest entry. Examples attending across a
    # boundary change some gradient by ~100 % of its largest entry (the control below).
    cfg = module.model.config
    n = sum(lengths) * cfg.num_hidden_layers * (max(lengths) + 4 * cfg.hidden_size)
    eps = sum_relative_error(n)
    assert math.isclose(float(loss), float(ref_loss), rel_tol=eps), (float(loss), float(ref_loss), eps)
    assert grads.keys() == ref_grads.keys() and len(grads) > 10
    for name, g in grads.items():
        ref = ref_grads[name]
        torch.testing.assert_close(g, ref, rtol=0, atol=eps * float(ref.abs().max()) + 1e-30, msg=name)

    # the control: the same rows with the boundaries dropped (one causal sequence per row)
    leaky = {k: v for k, v in packed.items() if k not in ("position_ids", "cu_seqlens", "max_seqlen")}
    _, leaky_grads = _loss_and_grads(module, [leaky])
    worst = max(float((leaky_grads[n] - ref_grads[n]).abs().max() / ref_grads[n].abs().max()) for n in ref_grads)
    assert worst > 100 * eps  # a random-init model's loss barely depends on the context; its gradients do


def test_the_varlen_kernel_computes_in_autocasts_half_precision_and_never_in_float32():
    """The flash varlen kernel takes only float16/bfloat16 (a float32 query reached it from full
    fine-tuning's float32 q_norm weight under bf16-mixed, and the kernel refused it on a GPU)."""
    from ifdistill.train.packed_attention import varlen_dtype

    q32, q16 = torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16)
    assert varlen_dtype(q32) is None  # outside autocast: the per-example SDPA calls
    assert varlen_dtype(q16) == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert varlen_dtype(q32) == torch.bfloat16  # as autocast runs scaled_dot_product_attention
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        assert varlen_dtype(q32) is None
