"""Packed rows on CUDA in bf16-mixed: the boundaries reach PyTorch's varlen flash kernel, and the loss and
gradients are those of the examples run one at a time (``tests/unit/train/test_packed_attention.py`` is the
float32 CPU proof of the same equality; flash kernels exist only in half precision on a GPU)."""

from __future__ import annotations

import pytest
import torch

from bench.gpu_steps import autocast
from ifdistill.data.collate import PackCollator, PadCollator
from ifdistill.train import packed_attention
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train.method import TrainingInputs
from tests.gpu.tolerance import bf16_mean_loss_tolerance, bf16_relative_error
from tests.unit.train.conftest import TINY

pytestmark = pytest.mark.gpu


def _run(module, batches):
    module.zero_grad(set_to_none=True)
    loss_sum, count = torch.zeros((), device="cuda"), 0
    for b in batches:
        b = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in b.items()}
        with autocast("cuda", "bf16-mixed"):
            loss, stats = module.objective(b)
        loss.backward()
        loss_sum += loss.detach().float()
        count += int(stats["count"])
    grads = torch.cat([p.grad.flatten().float() for p in module.parameters() if p.requires_grad])
    return float(loss_sum) / count, grads


@pytest.mark.parametrize("impl", ["packed_sdpa", "sdpa"])
def test_packed_rows_on_cuda_give_the_per_example_loss(impl, icl_items, tiny_tokenizer, monkeypatch):
    kernel = packed_attention._varlen_kernel()
    assert impl != "packed_sdpa" or kernel is not None, "this torch has no torch.nn.attention.varlen"
    calls = []
    if kernel is not None:
        fn, *keywords = kernel

        def spy(*args, **kwargs):
            calls.append(args[0].shape)
            return fn(*args, **kwargs)

        monkeypatch.setattr(packed_attention, "_varlen_kernel", lambda: (spy, *keywords))
    pad = tiny_tokenizer.pad_token_id
    torch.manual_seed(0)
    module = SFTModule(TrainingInputs(TINY, {"method": "none"}, attn_implementation=impl)).cuda().eval()
    ref_loss, ref_grads = _run(module, [PadCollator(pad)([it]) for it in icl_items])
    loss, grads = _run(module, [PackCollator(pad)(icl_items)])
    assert (len(calls) > 0) == (impl == "packed_sdpa")  # the varlen kernel ran exactly where it should
    layers = module.model.config.num_hidden_layers
    with torch.no_grad(), autocast("cuda", "bf16-mixed"):
        b = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in PadCollator(pad)(icl_items).items()}
        rows, cols, _ = module.supervised(b)
        zmax = float(module.lm(b["input_ids"], rows, cols, attention_mask=b["attention_mask"]).abs().max())
    # each side lies within the bf16-mixed bound of the float32 value (tests/gpu/tolerance.py): twice it apart
    tol = 2 * bf16_mean_loss_tolerance(layers, zmax, kd=False)
    assert abs(loss - ref_loss) <= tol, (loss, ref_loss, tol)
    eps = bf16_relative_error(layers)
    assert float((grads - ref_grads).norm()) <= 2 * eps * float(ref_grads.norm())
