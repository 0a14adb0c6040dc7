"""SFT and distillation steps in bf16-mixed against the float32 CPU result on the same batch.

Each case runs on CUDA (``gpu``) and on CPU autocast (``cpu-autocast``, everywhere): the same functions
of ``bench/gpu_steps.py`` with the device as a parameter, so the tolerance (``tests/gpu/tolerance.py``)
and the step are proven on CPU and only the device changes on a GPU. The reference is the float32
module on CPU; the device module is a deep copy of it (same weights, LoRA ``B`` made non-zero).
"""

from __future__ import annotations

import copy

import pytest
import torch

from bench.gpu_steps import make_optimizer, mean_loss, place, train_step
from ifdistill.data.collate import IclCollator, PadCollator
from ifdistill.methods.distill.module import ICLDistillModule
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.train.modeling import base_causal_lm
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train.method import TrainingInputs
from tests.gpu.tolerance import bf16_mean_loss_tolerance, bf16_relative_error
from tests.unit.train.conftest import LORA, TINY, perturb_lora

DEVICES = [pytest.param("cpu", id="cpu-autocast"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
PEFTS = {"lora": LORA, "full": {"method": "none"}}


def _student_logits(module: SFTModule, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The full ``(N, V)`` logits at the supervised positions and their targets (no chunking)."""
    rows, cols, targets = module.supervised(batch)
    return module.lm(batch["input_ids"], rows, cols, attention_mask=batch.get("attention_mask"),
                     position_ids=batch.get("position_ids")), targets


def _reference(method: str, peft: str, pad_id: int, items, gradient_checkpointing: bool = False):
    """``(float32 CPU module, its batch, |z|max over the logits the loss reads)``."""
    torch.manual_seed(0)
    if method == "sft":
        module = SFTModule(TrainingInputs(TINY, PEFTS[peft], gradient_checkpointing=gradient_checkpointing))
        batch = PadCollator(pad_id)(items)
    else:
        module = ICLDistillModule(TrainingInputs(TINY, PEFTS[peft], gradient_checkpointing=gradient_checkpointing),
                                  DistillSettings(kd_ratio=0.5, teacher="frozen_initial"))
        batch = IclCollator(pad_id)(items)
    if peft == "lora":
        perturb_lora(module)
    module.eval()  # no dropout: the two runs must compute the same function
    with torch.no_grad():
        if method == "sft":
            z, _ = _student_logits(module, batch)
        else:
            rows, s_cols, t_cols, _ = module.completion_index(batch)
            z = torch.cat([module.lm(batch["input_ids"], rows, s_cols, attention_mask=batch.get("attention_mask")),
                           module.teacher_logits(batch, rows, t_cols)])
    return module, batch, float(z.abs().max())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("peft", ["lora", "full"])
@pytest.mark.parametrize("method", ["sft", "distill"])
def test_bf16_mixed_step_matches_float32_cpu_loss(method, peft, device, icl_items, tiny_tokenizer):
    ref, batch, zmax = _reference(method, peft, tiny_tokenizer.pad_token_id, icl_items)
    layers = base_causal_lm(ref.model).config.num_hidden_layers
    with torch.no_grad():
        want, stats = mean_loss(ref, batch, "cpu", "32-true")
    dev = place(copy.deepcopy(ref), device)
    trainable = {n: p.detach().clone() for n, p in dev.named_parameters() if p.requires_grad}
    got = train_step(dev, batch, make_optimizer(dev, lr=1e-3), device, "bf16-mixed")
    # bf16 autocast vs float32: |Δ| <= 2 ε |z|max (SFT) or 4 ε |z|max (CE + KL), ε = 4 sqrt(12 L + 2) 2^-8
    # (tests/gpu/tolerance.py); a step on other positions, a lost mask or an overflow exceeds it
    tol = bf16_mean_loss_tolerance(layers, zmax, kd=method == "distill")
    print(f"\n{method}/{peft}/{device}: bf16 {got:.6f} fp32 {float(want):.6f} |Δ| {abs(got - float(want)):.2e} tol {tol:.3f}")
    assert abs(got - float(want)) <= tol, (got, float(want), tol)
    if method == "sft":  # the control: an off-by-one target shift moves the float32 loss by more than tol
        with torch.no_grad():
            z, y = _student_logits(ref, batch)
            shifted = float(torch.nn.functional.cross_entropy(z, y.roll(1)))
        assert abs(shifted - float(want)) > tol, (shifted, float(want), tol)
    moved = [n for n, p in dev.named_parameters() if p.requires_grad and not torch.equal(p.detach(), trainable[n])]
    assert len(moved) == len(trainable) > 0  # every trainable tensor took the step
    assert all(torch.isfinite(p).all() for p in dev.parameters())
    assert next(p for p in dev.parameters()).device.type == torch.device(device).type


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("peft", ["lora", "full"])
def test_gradient_checkpointing_in_bf16_changes_memory_not_results(peft, device, icl_items, tiny_tokenizer):
    """The same bf16-mixed step with and without activation checkpointing: the forward is the same
    computation (identical loss); the backward recomputes it, so gradients differ at most by bf16
    roundings flipped by another summation order in the recomputed kernels."""
    out, layers = [], 0
    for gc in (False, True):
        ref, batch, _ = _reference("sft", peft, tiny_tokenizer.pad_token_id, icl_items, gradient_checkpointing=gc)
        layers = base_causal_lm(ref.model).config.num_hidden_layers
        dev = place(ref, device).train()  # train mode: checkpointing is active only in training
        for m in dev.modules():  # but no dropout (the tiny model's is 0; asserted, not assumed)
            assert not isinstance(m, torch.nn.Dropout) or m.p == 0.0
        loss, _ = mean_loss(dev, batch, device, "bf16-mixed")
        loss.backward()
        grads = torch.cat([p.grad.flatten().float() for p in dev.parameters() if p.requires_grad])
        out.append((float(loss.detach()), grads.cpu()))
    (l0, g0), (l1, g1) = out
    assert l0 == l1
    # every bf16 rounding of the backward chain may flip once: relative size of the difference <= ε
    eps = bf16_relative_error(layers)
    assert float((g0 - g1).norm()) <= eps * float(g0.norm()), (float((g0 - g1).norm()), float(g0.norm()))
    assert float(g0.norm()) > 0
