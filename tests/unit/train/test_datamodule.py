"""Batching for exact, resumable training: step-positioned windows, token totals, even validation shards."""

from __future__ import annotations

import numpy as np
import pytest

from ifdistill.data.sampler import ResumableDistributedSampler
from ifdistill.train.datamodule import PAD_INDEX, EvenShardBatchSampler, StepBatchSampler, TrainDataModule, _Tagged

from tests.unit.train.conftest import TINY, resolved, synthetic_data


def order(epoch):  # a different, deterministic order every epoch
    return list(np.random.default_rng(epoch).permutation(22))


def batcher(world=1, rank=0, steps=lambda: 0, mbs=2, acc=2):
    sampler = ResumableDistributedSampler(order, num_replicas=world, rank=rank)
    return StepBatchSampler(sampler, micro_batch_size=mbs, accumulate=acc, world_size=world,
                            tokens_of=lambda i: i + 1, steps_done=steps)


def test_windows_drop_the_tail_and_carry_their_token_total():
    b = batcher()
    assert b.steps_per_epoch() == 5 and len(b) == 10  # 22 examples, windows of 4: 2 left over
    batches = list(b)
    assert len(batches) == 10
    flat = [i for mb in batches for i, _ in mb]
    assert flat == order(0)[:20]
    for w in range(5):
        window = batches[2 * w] + batches[2 * w + 1]
        total = sum(i + 1 for i, _ in window)
        assert {t for _, t in window} == {total}


def test_position_is_a_function_of_the_optimizer_step():
    full = [mb for mb in batcher()]
    assert list(batcher(steps=lambda: 3)) == full[6:]  # resumed after step 3 of epoch 0
    epoch1 = [mb for mb in batcher(steps=lambda: 5)]
    assert [i for mb in epoch1 for i, _ in mb] == order(1)[:20]  # step 5 starts epoch 1
    assert list(batcher(steps=lambda: 7)) == epoch1[4:]


def test_two_ranks_take_disjoint_parts_of_each_global_window():
    r0, r1 = list(batcher(world=2, rank=0)), list(batcher(world=2, rank=1))
    assert len(r0) == len(r1)
    seen0 = {i for mb in r0 for i, _ in mb}
    seen1 = {i for mb in r1 for i, _ in mb}
    assert not seen0 & seen1


def test_validation_shards_are_even_and_padded_with_empty_examples():
    n, world = 5, 2
    shards = [list(EvenShardBatchSampler(n, batch_size=2, rank=r, world_size=world)) for r in range(world)]
    assert len(shards[0]) == len(shards[1])  # same number of forward passes on every rank
    flat = [i for s in shards for b in s for i in b]
    assert sorted(i for i in flat if i != PAD_INDEX) == list(range(n)) and flat.count(PAD_INDEX) == 1
    ds = _Tagged([{"input_ids": np.arange(4), "loss_mask": np.array([0, 1, 1, 1])}])
    assert ds[PAD_INDEX]["loss_mask"].sum() == 0 and ds[0]["loss_mask"].sum() == 3
    assert ds[(0, 17)]["_step_tokens"] == 17


def test_datamodule_batches_real_data_with_step_token_totals():
    dm = TrainDataModule(resolved(synthetic_data(30, heldout=4)), TINY, micro_batch_size=3, val_batch_size=4)
    assert dm.val_names == ["syn"]
    dm.setup("fit")
    loader = dm.train_dataloader()
    batch = next(iter(loader))
    assert batch["input_ids"].shape[0] == 3
    assert int(batch["step_tokens"]) == int(batch["num_supervised"].sum())  # accumulate 1: window = batch
    (val,) = dm.val_dataloader()
    assert sum(int((b["labels"] != -100).sum()) for b in val) > 0


def test_k_comes_from_the_method_section():
    dm = TrainDataModule(resolved(synthetic_data(30), k=2, demos="per_example"), TINY, micro_batch_size=2)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert "teacher_input_ids" in batch and int(batch["num_demos"].min()) == 2
    assert int(batch["step_tokens"]) == int(batch["completion_valid"].sum())
    with pytest.raises(ValueError):
        list(StepBatchSampler(dm.built.train.sampler(), micro_batch_size=64, accumulate=1, world_size=1,
                              tokens_of=lambda i: 1))


def test_distillation_with_k0_gets_identity_teacher_views():
    import torch

    from ifdistill.methods.distill.module import ICLDistillModule

    dm = TrainDataModule(resolved(synthetic_data(30), k=0), TINY, method=ICLDistillModule, micro_batch_size=2)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert torch.equal(batch["teacher_input_ids"], batch["input_ids"]) and int(batch["num_demos"].max()) == 0
    assert torch.equal(batch["teacher_positions"], batch["student_positions"])
