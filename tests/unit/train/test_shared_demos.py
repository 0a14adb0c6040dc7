"""Shared demonstrations: one prefix per micro-batch gives the same teacher logits as full teacher views."""

from __future__ import annotations

import pytest
import torch

from ifdistill.data.collate import IclCollator
from ifdistill.train.datamodule import TrainDataModule
from ifdistill.train.distill_module import ICLDistillModule
from ifdistill.train.shared_demos import split_teacher

from tests.unit.train.conftest import LORA, TINY, perturb_lora, synthetic_data


def test_split_finds_head_and_demonstrations():
    student = [1, 2, 3, 4]
    assert split_teacher(student, [9, 9, 1, 2, 3, 4]) == ([], [9, 9])        # demos before everything
    assert split_teacher([7, 3, 4], [7, 9, 9, 3, 4]) == ([7], [9, 9])         # after a system head
    assert split_teacher(student, [1, 9, 2, 3, 4, 5]) is None                 # not of that form
    assert split_teacher(student, student) is None                            # no demonstrations


@pytest.fixture(scope="module")
def shared_dm():
    dm = TrainDataModule(synthetic_data(40), TINY, micro_batch_size=4, icl_k=2, demos="shared")
    dm.setup("fit")
    return dm


def test_collator_shares_one_prefix_and_never_demonstrates_a_batch_example(shared_dm):
    collate = shared_dm._shared_demo_collator(shared_dm.tokenizer.pad_token_id)
    items = [shared_dm.built.train[i] for i in range(4)]
    batch = collate(items)
    assert "teacher_prefix_ids" in batch and "teacher_input_ids" not in batch
    assert int(batch["teacher_head_len"]) == 0  # ChatML without a system turn: demos come first
    again = collate(items)
    assert torch.equal(batch["teacher_prefix_ids"], again["teacher_prefix_ids"])  # deterministic
    exs = [collate.examples[(it["source"], it["row_id"])] for it in items]
    demos = collate.choose(exs)
    assert len(demos) == 2 and not {d.uid for d in demos} & {e.uid for e in exs}


def test_shared_prefix_teacher_equals_full_teacher_views(shared_dm):
    pad = shared_dm.tokenizer.pad_token_id
    collate = shared_dm._shared_demo_collator(pad)
    items = [shared_dm.built.train[i] for i in range(4)]
    shared = collate(items)
    exs = [collate.examples[(it["source"], it["row_id"])] for it in items]
    demos = collate.choose(exs)
    full = IclCollator(pad)([collate._teacher_view(it, ex, demos) for it, ex in zip(items, exs)])
    module = ICLDistillModule(TINY, LORA, k=2, teacher="frozen_initial", kd_ratio=0.5)
    perturb_lora(module)
    r1, s1, t1, y1 = module.completion_index(shared)
    r2, s2, t2, y2 = module.completion_index(full)
    assert torch.equal(r1, r2) and torch.equal(s1, s2) and torch.equal(y1, y2)
    a, b = module.teacher_logits(shared, r1, t1), module.teacher_logits(full, r2, t2)
    assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()
    loss_shared, stats_shared = module.objective(shared)
    loss_full, stats_full = module.objective(full)
    assert loss_shared.item() == pytest.approx(loss_full.item(), rel=1e-5)
    assert stats_shared["teacher_nll"].item() == pytest.approx(stats_full["teacher_nll"].item(), rel=1e-5)


def test_shared_batches_come_out_of_the_datamodule(shared_dm):
    batch = next(iter(shared_dm.train_dataloader()))
    assert "teacher_prefix_ids" in batch and int(batch["num_demos"].min()) == 2
    assert int(batch["step_tokens"]) == int(batch["completion_valid"].sum())


def test_teacher_max_length_drops_demonstrations_like_the_data_layer(shared_dm):
    pad = shared_dm.tokenizer.pad_token_id
    items = [shared_dm.built.train[i] for i in range(4)]
    full = shared_dm._shared_demo_collator(pad)(items)
    cap = int(full["teacher_prefix_ids"].numel()) + max(len(it["input_ids"]) for it in items) - 1
    capped = shared_dm._shared_demo_collator(pad)
    capped.teacher_max_length = cap
    batch = capped(items)
    assert int(batch["num_demos"].max()) == 1 and capped.demos_removed_for_length == 1
    assert batch["teacher_prefix_ids"].numel() < full["teacher_prefix_ids"].numel()
