"""Replay mixing: exact counts, nesting across ratios, same new-data order, weights."""

from __future__ import annotations

from fractions import Fraction

import pytest

from ifdistill.data.mixing import epoch_order, mix_indices, plan_mix, replay_counts, replay_schedule

RATIOS = (0, 0.05, 0.18, 0.5)
N_NEW = 2000


@pytest.mark.parametrize("ratio", RATIOS)
def test_counts_are_exact(ratio):
    mix = mix_indices(N_NEW, {"replay": 5000}, ratio, seed=3)
    n_rep = sum(1 for s, _ in mix if s != "new")
    r = Fraction(str(ratio))
    expected = int(N_NEW * r / (1 - r) + Fraction(1, 2))  # round half up
    assert n_rep == expected == {0: 0, 0.05: 105, 0.18: 439, 0.5: 2000}[ratio]
    assert sum(1 for s, _ in mix if s == "new") == N_NEW
    assert len(set(mix)) == len(mix)  # no replay example twice when the pool is large enough
    assert abs(n_rep / len(mix) - ratio) < 0.5 / len(mix) + 1e-12


@pytest.mark.parametrize("ratio", RATIOS)
def test_counts_with_fixed_total(ratio):
    mix = mix_indices(N_NEW, {"replay": 5000}, ratio, seed=3, total=1000)
    assert len(mix) == 1000
    assert sum(1 for s, _ in mix if s != "new") == {0: 0, 0.05: 50, 0.18: 180, 0.5: 500}[ratio]


def test_nested_and_new_data_order_identical_across_ratios():
    mixes = {r: mix_indices(N_NEW, {"a": 3000, "b": 800}, r, seed=11, weights={"a": 3, "b": 1}) for r in RATIOS}
    replay = {r: [x for x in m if x[0] != "new"] for r, m in mixes.items()}
    new = {r: [x for x in m if x[0] == "new"] for r, m in mixes.items()}
    for small, big in zip(RATIOS, RATIOS[1:]):
        assert set(replay[small]) < set(replay[big]), (small, big)
        assert new[small] == new[big]  # same new examples in the same order
        # replay examples also keep their relative order
        pos = {x: i for i, x in enumerate(replay[big])}
        assert [pos[x] for x in replay[small]] == sorted(pos[x] for x in replay[small])
    # with a fixed total the new data used at a higher ratio is a subset, in the same order
    fixed = {r: [x for x in mix_indices(N_NEW, {"a": 3000}, r, seed=11, total=1500) if x[0] == "new"] for r in RATIOS}
    for small, big in zip(RATIOS, RATIOS[1:]):
        kept = set(fixed[big])
        assert set(fixed[big]) <= set(fixed[small])
        assert [x for x in fixed[small] if x in kept] == fixed[big]


def test_seed_locks_everything():
    a = mix_indices(N_NEW, {"r": 900}, 0.18, seed=5)
    assert a == mix_indices(N_NEW, {"r": 900}, 0.18, seed=5)
    assert a != mix_indices(N_NEW, {"r": 900}, 0.18, seed=6)
    assert epoch_order(10, 3, seed=1, epoch=0) != epoch_order(10, 3, seed=1, epoch=1)


def test_weights_split_replay_exactly_and_monotonically():
    weights = {"smol": 2.0, "chat": 1.0, "math": 1.0}
    previous = dict.fromkeys(weights, 0)
    for n in range(0, 400):
        plan = plan_mix(1000, 0.0, weights, seed=0)  # counts come from the schedule alone
        counts = {s: 0 for s in weights}
        for s in replay_schedule(weights, n):
            counts[s] += 1
        for s, w in weights.items():
            assert abs(counts[s] - n * w / 4) <= 1.0, (n, counts)
            assert counts[s] >= previous[s]  # house-monotone: no source ever loses a slot
        previous = counts
    assert plan.per_source == {}
    plan = plan_mix(N_NEW, 0.5, weights, seed=0)
    assert plan.per_source == {"smol": 1000, "chat": 500, "math": 500}


def test_small_replay_pool_needs_explicit_repeats():
    with pytest.raises(ValueError, match="allow_repeats"):
        mix_indices(100, {"r": 10}, 0.5, seed=0)
    mix = mix_indices(100, {"r": 10}, 0.5, seed=0, allow_repeats=True)
    rows = [i for s, i in mix if s == "r"]
    assert len(rows) == 100 and sorted(set(rows)) == list(range(10))
    assert all(rows.count(i) == 10 for i in range(10))


def test_invalid_ratio_and_unsorted_order():
    with pytest.raises(ValueError, match="ratio"):
        replay_counts(10, 1.0)
    with pytest.raises(ValueError, match="ratio"):
        replay_counts(10, -0.1)
    with pytest.raises(ValueError, match="no replay source"):
        plan_mix(10, 0.5, {}, seed=0)
    assert epoch_order(4, 2, seed=0, shuffle=False) == [0, 4, 1, 2, 5, 3]
