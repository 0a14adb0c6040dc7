"""The SFT and ICL-distillation modules on the tiny model with real (small) batches."""

from __future__ import annotations

import pytest
import torch

from ifdistill.data.collate import IclCollator, PadCollator
from ifdistill.methods.distill.module import ICLDistillModule
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.train.modeling import QLoRAUnavailable, build_model
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train.method import TrainingInputs

from tests.unit.train.conftest import LORA, TINY, k0_items, perturb_lora


@pytest.fixture(scope="module")
def pad_id(tiny_tokenizer):
    return tiny_tokenizer.pad_token_id


def _grads(module):
    return {n: p.grad.clone() for n, p in module.lm.named_parameters() if p.requires_grad}


def test_kd_ratio_zero_equals_sft_in_loss_and_gradients(icl_items, pad_id):
    sft = SFTModule(TrainingInputs(TINY, LORA))
    perturb_lora(sft)
    dist = ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(kd_ratio=0.0, teacher="frozen_initial"))
    dist.lm.load_state_dict(sft.lm.state_dict())
    sft_batch, icl_batch = PadCollator(pad_id)(icl_items), IclCollator(pad_id)(icl_items)
    assert int(icl_batch["num_demos"].min()) == 2

    loss_s, stats_s = sft.objective(sft_batch)
    loss_s.backward()
    loss_d, stats_d = dist.objective(icl_batch)
    loss_d.backward()
    assert stats_d["kd"].item() > 1e-3  # the teacher does differ; it just has weight 0
    assert torch.equal(loss_s, loss_d)
    assert stats_s["count"].item() == stats_d["count"].item() > 0
    gs, gd = _grads(sft), _grads(dist)
    assert gs.keys() == gd.keys() and len(gs) > 0
    for name in gs:
        assert torch.equal(gs[name], gd[name]), name


@pytest.mark.parametrize("teacher", ["self_stopgrad", "frozen_initial"])
def test_k0_teacher_equal_to_the_student_gives_zero_kl(icl_items, pad_id, teacher):
    dist = ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(kd_ratio=0.5, teacher=teacher))
    if teacher == "self_stopgrad":
        perturb_lora(dist)  # a trained adapter: the current model is still its own teacher
    loss, stats = dist.objective(IclCollator(pad_id)(k0_items(icl_items)))
    assert stats["count"].item() > 0
    assert abs(stats["kd"].item()) < 1e-5
    assert stats["teacher_nll"].item() == pytest.approx(stats["nll"].item(), rel=1e-6)


def test_frozen_initial_with_lora_is_the_base_model_without_a_copy(icl_items, pad_id):
    dist = ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(teacher="frozen_initial"))
    sft = SFTModule(TrainingInputs(TINY, LORA))
    assert dist._frozen == []  # no second model in memory
    assert sum(p.numel() for p in dist.parameters()) == sum(p.numel() for p in sft.parameters())
    perturb_lora(dist)
    batch = IclCollator(pad_id)(icl_items)
    rows, s_cols, t_cols, _ = dist.completion_index(batch)
    teacher = dist.teacher_logits(batch, rows, t_cols)
    assert not teacher.requires_grad  # computed under no_grad
    base = build_model(TINY).eval()  # the initial weights, loaded afresh, no adapter
    with torch.no_grad():
        hidden = base.model(input_ids=batch["teacher_input_ids"], attention_mask=batch["teacher_attention_mask"]).last_hidden_state
        expected = base.lm_head(hidden[rows, t_cols]).float()
    assert torch.allclose(teacher, expected, atol=1e-5)
    with torch.no_grad():
        student_view_teacher = dist.lm(batch["teacher_input_ids"], rows, t_cols,
                                       attention_mask=batch["teacher_attention_mask"])
    assert not torch.allclose(teacher, student_view_teacher, atol=1e-3)  # the adapter is really disabled


def test_full_finetuning_teacher_is_a_frozen_copy_outside_the_state_dict(icl_items, pad_id):
    dist = ICLDistillModule(TrainingInputs(TINY, {"method": "none"}, optim={"lr": 1e-2}),
                            DistillSettings(teacher="frozen_initial"))
    assert len(dist._frozen) == 1
    assert all(not p.requires_grad for p in dist._frozen[0].parameters())
    assert all(k.startswith("lm.") for k in dist.state_dict())  # the copy is not checkpointed
    before = {k: v.clone() for k, v in dist._frozen[0].state_dict().items()}
    loss, _ = dist.objective(IclCollator(pad_id)(icl_items))
    loss.backward()
    torch.optim.SGD(dist.lm.parameters(), lr=1.0).step()
    after = dist._frozen[0].state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # training never moves the teacher


def test_separate_teacher_is_loaded_frozen(icl_items, pad_id):
    dist = ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(teacher="separate", teacher_model=TINY))
    assert len(dist._frozen) == 1 and not any(p.requires_grad for p in dist._frozen[0].parameters())
    _, stats = dist.objective(IclCollator(pad_id)(icl_items))
    assert stats["teacher_count"].item() == stats["count"].item()


def test_invalid_method_settings_fail_at_construction():
    with pytest.raises(ValueError, match="kl"):
        ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(kl="sideways"))
    with pytest.raises(ValueError, match="teacher_model"):
        ICLDistillModule(TrainingInputs(TINY, LORA), DistillSettings(teacher="separate"))


def test_qlora_without_gpu_or_bitsandbytes_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the error path is for machines without one")
    with pytest.raises(QLoRAUnavailable, match="QLoRA"):
        build_model(TINY, {"method": "lora", "quantize": "4bit"})


def test_sft_counts_only_supervised_tokens_with_the_shift(icl_items, pad_id):
    sft = SFTModule(TrainingInputs(TINY, LORA))
    batch = PadCollator(pad_id)(icl_items)
    rows, cols, targets = sft.supervised(batch)
    logits = sft.lm(batch["input_ids"], rows, cols, attention_mask=batch["attention_mask"])
    expected = sum(int(it["loss_mask"].sum()) for it in icl_items)
    assert logits.shape[0] == targets.shape[0] == expected
    # the targets are the supervised tokens themselves, in order
    want = torch.cat([torch.as_tensor(it["input_ids"])[torch.as_tensor(it["loss_mask"]).bool()] for it in icl_items])
    assert torch.equal(targets, want)


def test_gradient_checkpointing_changes_memory_not_results(icl_items, pad_id):
    batch = PadCollator(pad_id)(icl_items)
    out = []
    for gc in (False, True):
        torch.manual_seed(0)
        module = SFTModule(TrainingInputs(TINY, LORA, gradient_checkpointing=gc))
        perturb_lora(module)
        module.train()
        loss, _ = module.objective(batch)
        loss.backward()
        out.append((loss.detach(), _grads(module)))
    (l0, g0), (l1, g1) = out
    assert torch.allclose(l0, l1, rtol=1e-6)
    assert all(torch.allclose(g0[n], g1[n], atol=1e-6) for n in g0)
