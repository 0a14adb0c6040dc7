"""The per-rank sampler: disjoint shards covering the epoch, and mid-epoch resume."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils.data import DataLoader

from ifdistill.data.mixing import epoch_order
from ifdistill.data.sampler import ResumableDistributedSampler


def shards(n_or_order, world, **kw):
    return [list(ResumableDistributedSampler(n_or_order, num_replicas=world, rank=r, **kw)) for r in range(world)]


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shards_disjoint_and_cover_the_epoch(world):
    order = lambda e: epoch_order(100, 20, seed=7, epoch=e)  # noqa: E731  (n=120, divisible by 1..4)
    parts = shards(order, world, seed=7)
    assert all(len(p) == 120 // world for p in parts)
    flat = list(itertools.chain(*parts))
    assert len(flat) == len(set(flat)) == 120
    assert set(flat) == set(range(120))
    # interleaving the shards gives back the global order
    assert [parts[i % world][i // world] for i in range(120)] == order(0)


def test_uneven_epoch_pads_or_drops():
    padded = shards(10, 4, seed=1)
    assert [len(p) for p in padded] == [3, 3, 3, 3]
    flat = list(itertools.chain(*padded))
    assert set(flat) == set(range(10)) and len(flat) == 12  # 2 items repeated, as DistributedSampler
    dropped = shards(10, 4, seed=1, drop_last=True)
    flat = list(itertools.chain(*dropped))
    assert [len(p) for p in dropped] == [2, 2, 2, 2] and len(set(flat)) == 8


def test_resume_mid_epoch_continues_the_same_order():
    world, n = 2, 50
    full = [list(ResumableDistributedSampler(n, num_replicas=world, rank=r, seed=3)) for r in range(world)]
    for r in range(world):
        s = ResumableDistributedSampler(n, num_replicas=world, rank=r, seed=3)
        it = iter(s)
        head = [next(it) for _ in range(9)]
        state = s.state_dict()
        assert state["num_samples_consumed"] == 9 * world and state["epoch"] == 0
        fresh = ResumableDistributedSampler(n, num_replicas=world, rank=r, seed=3)
        fresh.load_state_dict(state)
        fresh.set_epoch(0)  # Lightning calls this at the start of the epoch: keeps the position
        assert len(fresh) == len(full[r]) - 9
        assert head + list(fresh) == full[r]


def test_resume_with_an_explicit_count_and_across_epochs():
    s = ResumableDistributedSampler(30, seed=9)
    epoch0 = list(s)
    s.set_epoch(1)
    epoch1 = list(s)
    assert epoch0 != epoch1 and sorted(epoch0) == sorted(epoch1) == list(range(30))
    resumed = ResumableDistributedSampler(30, seed=9)
    resumed.load_state_dict({**s.state_dict(num_samples_consumed=12), "epoch": 1})
    assert list(resumed) == epoch1[12:]
    # A checkpoint at the end of an epoch resumes in the next epoch, never replaying the finished one.
    done = ResumableDistributedSampler(30, seed=9)
    list(done)
    after = ResumableDistributedSampler(30, seed=9)
    after.load_state_dict(done.state_dict())
    assert list(after) == epoch1


def test_works_in_a_dataloader_and_checks_state():
    data = torch.arange(40)
    sampler = ResumableDistributedSampler(40, num_replicas=2, rank=1, seed=0)
    batches = list(DataLoader(data, batch_size=4, sampler=sampler))
    assert torch.cat(batches).tolist() == list(ResumableDistributedSampler(40, num_replicas=2, rank=1, seed=0))
    with pytest.raises(ValueError, match="seed"):
        ResumableDistributedSampler(40, seed=1).load_state_dict(sampler.state_dict())
    with pytest.raises(ValueError, match="data changed"):
        ResumableDistributedSampler(41, seed=0).load_state_dict({**sampler.state_dict(), "num_replicas": 1})
    with pytest.raises(ValueError, match="rank"):
        ResumableDistributedSampler(40, num_replicas=2, rank=2)
