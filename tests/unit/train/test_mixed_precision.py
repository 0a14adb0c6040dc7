"""Precision of the trained weights under bf16-mixed (``torch.autocast``), on CPU autocast.

- LoRA: the frozen base keeps ``model.dtype`` (bfloat16), the adapters are float32 master weights, and
  under autocast :class:`~ifdistill.train.modeling.SelectiveLM` turns off PEFT's cast of each adapted
  layer's input to float32 (autocast casts it straight back for the adapter's matmuls). The result is
  the same: bf16 -> fp32 -> bf16 is exact, so the same bfloat16 GEMMs run on the same operands.
- Full fine-tuning loads float32 master weights whatever ``model.dtype`` says.
"""

from __future__ import annotations

import pytest
import torch

from ifdistill.data.collate import PadCollator
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train.method import TrainingInputs
from tests.gpu.tolerance import bf16_relative_error
from tests.unit.train.conftest import LORA, perturb_lora

BF16_TINY = {"name_or_path": "builtin:tiny", "dtype": "bfloat16"}


def test_full_fine_tuning_trains_float32_master_weights_and_lora_a_bfloat16_base():
    full = SFTModule(TrainingInputs(BF16_TINY, {"method": "none"}))
    assert {p.dtype for p in full.parameters()} == {torch.float32}
    lora = SFTModule(TrainingInputs(BF16_TINY, LORA))
    assert {p.dtype for p in lora.parameters() if p.requires_grad} == {torch.float32}
    assert {p.dtype for p in lora.parameters() if not p.requires_grad} == {torch.bfloat16}


def test_lora_under_autocast_skips_the_input_casts_and_computes_the_same(icl_items, tiny_tokenizer, monkeypatch):
    from peft.tuners.tuners_utils import BaseTunerLayer

    torch.manual_seed(0)
    module = SFTModule(TrainingInputs(BF16_TINY, LORA))
    perturb_lora(module)
    module.eval()  # no dropout: the same function twice
    batch = PadCollator(tiny_tokenizer.pad_token_id)(icl_items[:2])
    layers = module.model.config.num_hidden_layers
    cast = BaseTunerLayer._cast_input_dtype

    def run(skip_casts: bool):
        seen: list[torch.dtype] = []

        def spy(self, x, dtype):
            out = cast(self, x, dtype)
            if out is not None:
                seen.append(out.dtype)
            return out

        monkeypatch.setattr(BaseTunerLayer, "_cast_input_dtype", spy)
        kept = module.lm._tuner_layers
        module.lm._tuner_layers = kept if skip_casts else []  # [] : PEFT's own behaviour, the casts on
        module.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = module.objective(batch)
        loss.backward()
        module.lm._tuner_layers = kept
        monkeypatch.undo()
        grads = {n: p.grad.float().clone() for n, p in module.named_parameters() if p.requires_grad}
        return float(loss.detach()), grads, seen

    loss_new, grads_new, seen_new = run(skip_casts=True)
    loss_old, grads_old, seen_old = run(skip_casts=False)
    assert seen_old and set(seen_old) == {torch.float32}  # PEFT's path: every adapted input cast to float32
    assert seen_new and set(seen_new) == {torch.bfloat16}  # now: the input stays in the compute dtype
    # Same GEMMs on the same operands; at most the order in which autograd adds the adapter's and the base
    # path's input gradients (bf16) differs: one bf16 rounding per layer, so within the bf16 relative error
    # of the layer chain (tests/gpu/tolerance.py); a wrong cast (fp32 GEMM, or the adapter dropped) would
    # move the loss by far more than this on the perturbed adapter.
    eps = bf16_relative_error(layers)
    assert loss_new == pytest.approx(loss_old, rel=eps)
    assert grads_new.keys() == grads_old.keys() and grads_new
    for name, g in grads_new.items():
        ref = grads_old[name]
        torch.testing.assert_close(g, ref, rtol=0, atol=eps * float(ref.abs().max()), msg=name)
