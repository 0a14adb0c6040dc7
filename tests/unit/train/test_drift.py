"""Drift from the base (ifdistill.train.drift) against a direct full-vocabulary computation."""

from __future__ import annotations

import math

import pytest
import torch

from ifdistill.data.collate import PadCollator
from ifdistill.methods.distill.module import ICLDistillModule
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.train.drift import DRIFT_KEYS, drift_sums
from ifdistill.train.losses import supervised_positions
from ifdistill.train.modeling import adapter_disabled, build_model
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train.method import TrainingInputs

from tests.unit.train.conftest import LORA, TINY, perturb_lora

EPS32 = torch.finfo(torch.float32).eps


def _direct_kl(model_logits: torch.Tensor, base_logits: torch.Tensor) -> tuple[float, float]:
    """Per-token KL(base || model) and KL(model || base): float64 softmax over the whole vocabulary."""
    p, q = model_logits.double().softmax(-1), base_logits.double().softmax(-1)
    kl_bm = (q * (q.log() - p.log())).sum(-1)
    kl_mb = (p * (p.log() - q.log())).sum(-1)
    return kl_bm.mean().item(), kl_mb.mean().item()


def _supervised_logits(hf_model, batch) -> torch.Tensor:
    """The HF model's own forward over whole rows, then the logits that predict supervised tokens."""
    with torch.no_grad():
        logits = hf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    rows, cols = supervised_positions(batch["labels"])
    return logits[rows, cols].float()


def _validate(module, batch) -> dict[str, float]:
    """One held-out pass through the module's own validation step; the per-token values it logs."""
    module.lm.eval()
    with torch.no_grad():
        module.validation_step(batch, 0)
    sums = module.val_sums["heldout"].reduce()
    return {k: sums[k] / sums["count"] for k in DRIFT_KEYS} | {"count": sums["count"]}


def _tolerance(*logits: torch.Tensor) -> float:
    """Bound on the difference of a per-token KL between the module and the float64 reference.

    The module's logits and the reference's come out of float32 kernels on two call paths (the
    selective, chunked head; the HF forward). A logit is a length-H dot product (H = 64 here): its
    rounding error grows like sqrt(H) ulps of the largest logit under random rounding; with a margin
    of 8, ``delta = 8 * eps32 * max|logit| * sqrt(H)``. A log-softmax moves by at most twice its inputs'
    largest change, and a p-weighted sum of changes by at most the largest, so each KL direction (two
    log-softmaxes) is off by at most ``4 * delta`` per token, and so is the mean over tokens."""
    biggest = max(float(x.abs().max()) for x in logits)
    return 4 * 8 * EPS32 * biggest * 64 ** 0.5


def test_lora_drift_equals_the_full_vocabulary_kl_of_adapter_on_and_off(icl_items, tiny_tokenizer):
    module = SFTModule(TrainingInputs(TINY, LORA, logit_chunk_size=3, drift_from_base=True))  # several chunks per batch
    module.setup("fit")
    assert module.drift.adapter and not module.drift.own_copy  # no copy: the adapter is switched off
    batch = PadCollator(tiny_tokenizer.pad_token_id)(icl_items[:2])  # two examples suffice
    at_start = _validate(module, batch)
    assert at_start["kl_base_model"] == 0.0 and at_start["kl_model_base"] == 0.0  # B = 0: the same logits

    perturb_lora(module, std=0.2)
    got = _validate(module, batch)
    model_logits = _supervised_logits(module.model, batch)
    with adapter_disabled(module.model):
        base_logits = _supervised_logits(module.model, batch)
    expected = _direct_kl(model_logits, base_logits)
    tol = _tolerance(model_logits, base_logits)
    assert expected[0] > 100 * tol and expected[1] > 100 * tol  # the adapter really moved the model
    assert got["kl_base_model"] == pytest.approx(expected[0], abs=tol)
    assert got["kl_model_base"] == pytest.approx(expected[1], abs=tol)
    assert got["count"] == int((batch["labels"][:, 1:] != -100).sum())


def test_full_finetuning_compares_with_a_copy_of_the_initial_weights(icl_items, tiny_tokenizer):
    module = SFTModule(TrainingInputs(TINY, {"method": "none"}, drift_from_base=True))
    module.setup("fit")
    assert module.drift.own_copy and not any(p is q for p in module.drift.lm.parameters()
                                             for q in module.lm.parameters())
    assert "drift" not in "".join(module.state_dict())  # the copy is not saved with the module
    with torch.no_grad():
        for p in module.lm.parameters():
            p.add_(0.02 * torch.randn_like(p))
    batch = PadCollator(tiny_tokenizer.pad_token_id)(icl_items[:2])  # two examples suffice
    got = _validate(module, batch)
    base = build_model(TINY).eval()  # the initial weights, loaded afresh
    model_logits, base_logits = _supervised_logits(module.model, batch), _supervised_logits(base, batch)
    expected = _direct_kl(model_logits, base_logits)
    tol = _tolerance(model_logits, base_logits)
    assert got["kl_base_model"] == pytest.approx(expected[0], abs=tol)
    assert got["kl_model_base"] == pytest.approx(expected[1], abs=tol)


def test_distillation_reuses_its_frozen_teacher_and_sft_without_the_key_holds_nothing():
    dist = ICLDistillModule(TrainingInputs(TINY, {"method": "none"}, drift_from_base=True),
                            DistillSettings(teacher="frozen_initial"))
    dist.setup("fit")
    assert dist.drift.lm is dist._frozen[0] and not dist.drift.own_copy
    plain = SFTModule(TrainingInputs(TINY, {"method": "none"}))
    plain.setup("fit")
    assert plain.drift is None and set(plain.val_sums["heldout"].keys).isdisjoint(DRIFT_KEYS)


def test_drift_sums_of_two_known_distributions():
    """Two 2-outcome distributions written out: p = (1/2, 1/2), q = (1/4, 3/4) (logits = log-probabilities)."""
    p, q = torch.tensor([[0.5, 0.5]]), torch.tensor([[0.25, 0.75]])
    sums = drift_sums(p.log(), q.log())
    kl_qp = 0.25 * torch.log(torch.tensor(0.5)) + 0.75 * torch.log(torch.tensor(1.5))
    kl_pq = 0.5 * torch.log(torch.tensor(2.0)) + 0.5 * torch.log(torch.tensor(2 / 3))
    assert sums["kl_base_model"].item() == pytest.approx(kl_qp.item(), abs=4 * EPS32)
    assert sums["kl_model_base"].item() == pytest.approx(kl_pq.item(), abs=4 * EPS32)


def test_a_bf16_model_without_autocast_compares_with_its_float32_copy(icl_items, tiny_tokenizer):
    """DeepSpeed's bf16 mode casts the trained model to bf16 and runs it without autocast, while the base's
    frozen copy (outside the module tree) stays float32: the base's hidden states reach the copy's float32
    head as float32 (a bf16 input to it was a dtype error on CPU and under ZeRO-3 on a GPU)."""
    module = SFTModule(TrainingInputs(TINY, {"method": "none"}, drift_from_base=True))
    module.setup("fit")
    module.to(torch.bfloat16)
    assert next(module.drift.lm.parameters()).dtype == torch.float32
    batch = PadCollator(tiny_tokenizer.pad_token_id)(icl_items[:2])
    got = _validate(module, batch)
    model_logits = _supervised_logits(module.model, batch)
    base_logits = _supervised_logits(build_model(TINY).eval(), batch)
    expected = _direct_kl(model_logits, base_logits)
    # The two computations share the float32 base and the bf16 model; the model's logits come from two bf16
    # call paths (the selective head, the HF forward) that may round a logit one bf16 ulp apart:
    # eps = eps_bf16 * 2^ceil(log2 max|z|). A KL moves with the model's logits by its gradient, whose
    # L1 norm is at most |p - q|_1 <= exp(2 max|z_model - z_base|) - 1 (for KL(p||q) twice that, with the
    # log-ratio term), so each direction is off by at most 2 * (exp(2 delta) - 1) * eps.
    ulp = torch.finfo(torch.bfloat16).eps * 2 ** math.ceil(math.log2(float(model_logits.abs().max())))
    delta = float((model_logits - base_logits).abs().max())
    tol = 2 * math.expm1(2 * delta) * ulp
    for key, want in zip(DRIFT_KEYS, expected):
        assert math.isfinite(got[key]) and got[key] >= 0
        assert got[key] == pytest.approx(want, abs=tol), key
