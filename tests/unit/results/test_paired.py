"""Deltas, paired standard errors, McNemar, bootstrap and noise flags on vectors built by hand."""

from __future__ import annotations

import math

import pytest

from ifdistill.results import paired
from ifdistill.evaluator.output import PromptResult, paired_samples

from ifdistill.benchmarks.instruction_following.stats import METRICS, aggregate
from tests.unit.results.result_files import simple_rows


def _results(rows):
    return [PromptResult(key=r["key"], instruction_ids=tuple(r["instruction_id_list"]),
                         strict_inst=tuple(r["strict_inst"]), loose_inst=tuple(r["loose_inst"]),
                         strict_prompt=r["strict_prompt"], loose_prompt=r["loose_prompt"]) for r in rows]


def _pair(ref_pass, run_pass):
    ref_rows, run_rows = simple_rows(ref_pass), simple_rows(run_pass)
    return aggregate(run_rows), _results(run_rows), aggregate(ref_rows), _results(ref_rows)


def test_mcnemar_pvalue_and_paired_se_equal_hand_computed_values():
    # 20 prompts: the reference passes 0-9; the run passes 0-7 and 10-15 -> 6 gained, 2 lost.
    ref = [i < 10 for i in range(20)]
    run = [i < 8 or 10 <= i < 16 for i in range(20)]
    out = paired.compare(*_pair(ref, run), n_resamples=2000)
    t = out["mcnemar"]["strict"]
    assert (t["gained"], t["lost"], t["n_discordant"]) == (6, 2, 8)
    # exact two-sided: 2 * (C(8,0) + C(8,1) + C(8,2)) / 2^8 = 74 / 256
    assert t["p_value"] == pytest.approx(74 / 256, abs=1e-12)
    m = out["metrics"]["prompt_level_strict_acc"]
    assert m["run"] == pytest.approx(0.7) and m["reference"] == pytest.approx(0.5)
    assert m["delta"] == pytest.approx(0.2)
    # d_i: +1 x6, -1 x2, 0 x12; sum (d - 0.2)^2 = 6*0.64 + 2*1.44 + 12*0.04 = 7.2
    assert m["se"] == pytest.approx(math.sqrt(7.2 / 19 / 20), rel=1e-12)
    assert m["se_kind"] == "paired" and m["within_2se"] is True  # 0.2 < 2 * 0.1377


def test_paired_se_detects_a_gain_the_unpaired_se_calls_noise():
    # 100 prompts: the reference passes 40, the run passes those 40 and 12 more (no losses).
    ref = [i < 40 for i in range(100)]
    run = [i < 52 for i in range(100)]
    run_m, run_s, ref_m, ref_s = _pair(ref, run)
    with_samples = paired.compare(run_m, run_s, ref_m, ref_s, n_resamples=500)["metrics"]["prompt_level_strict_acc"]
    sd = math.sqrt((12 * 0.88**2 + 88 * 0.12**2) / 99)
    assert with_samples["se"] == pytest.approx(sd / 10, rel=1e-12)
    assert with_samples["within_2se"] is False
    without = paired.compare(run_m, None, ref_m, ref_s)["metrics"]["prompt_level_strict_acc"]
    unpaired_se = math.sqrt(0.52 * 0.48 / 99 + 0.4 * 0.6 / 99)
    assert without["se_kind"] == "unpaired" and without["se"] == pytest.approx(unpaired_se, rel=1e-9)
    assert without["delta"] == pytest.approx(0.12) and without["within_2se"] is True


def test_bootstrap_interval_covers_the_known_difference_and_collapses_for_identical_runs():
    ref = [i % 2 == 0 for i in range(200)]          # 100 / 200
    run = [i % 2 == 0 or i % 5 == 1 for i in range(200)]  # + the odd i with i % 5 == 1: 20 more
    out = paired.compare(*_pair(ref, run), n_resamples=3000, seed=1)
    b = out["bootstrap"]["strict"]
    assert b["difference"] == pytest.approx(0.1)
    assert b["ci_low"] < 0.1 < b["ci_high"] and b["ci_low"] > 0  # no losses: every resample is >= 0
    same = paired.compare(*_pair(ref, ref), n_resamples=200)
    assert same["bootstrap"]["strict"]["ci_low"] == same["bootstrap"]["strict"]["ci_high"] == 0
    assert same["mcnemar"]["strict"]["p_value"] == 1.0
    assert same["metrics"]["prompt_level_strict_acc"]["within_2se"] is True  # 0 < 2 * 0


def test_instruction_level_paired_se_is_clustered_by_prompt():
    # prompts with 2, 1, 3 instructions; run follows [2, 0, 1], reference [1, 1, 1]
    ids = [["a", "b"], ["a"], ["a", "b", "c"]]
    run_inst = [[True, True], [False], [True, False, False]]
    ref_inst = [[True, False], [True], [False, True, False]]

    def rows(inst):
        return [PromptResult(key=str(i), instruction_ids=tuple(ids[i]), strict_inst=tuple(x),
                             loose_inst=tuple(x), strict_prompt=all(x), loose_prompt=all(x))
                for i, x in enumerate(inst)]

    metrics = {m: 0.0 for m in METRICS}
    out = paired.compare(metrics, rows(run_inst), metrics, rows(ref_inst), n_resamples=10)
    m = out["metrics"]["inst_level_strict_acc"]
    # d = [1, -1, 0], delta = 0, residuals 1 + 1 + 0 -> sqrt(3/2 * 2) / 6
    assert m["delta"] == 0 and m["se"] == pytest.approx(math.sqrt(3) / 6)
    per_type = paired.per_type_changes(rows(run_inst), rows(ref_inst), {}, {})
    assert per_type["b"]["gained"] == 1 and per_type["b"]["forgotten"] == 1 and per_type["b"]["delta"] == 0
    assert per_type["a"]["gained"] == 1 and per_type["a"]["forgotten"] == 1
    assert per_type["a"]["count"] == 3 and per_type["a"]["reference"] == pytest.approx(2 / 3)
    assert per_type["c"] == pytest.approx({"count": 1, "reference": 0.0, "run": 0.0, "delta": 0.0,
                                           "se": math.nan, "within_2se": True, "gained": 0, "forgotten": 0},
                                          nan_ok=True)


def test_pairing_is_by_key_not_position():
    rows = simple_rows([True, False, True, False])
    shuffled = list(reversed(rows))
    a, b = paired_samples(_results(rows), _results(shuffled))
    assert [x.key for x in a] == [x.key for x in b]
    out = paired.compare(aggregate(rows), _results(rows), aggregate(shuffled), _results(shuffled), n_resamples=10)
    assert out["mcnemar"]["strict"]["n_discordant"] == 0


def test_within_noise_flag_boundaries():
    assert paired.within_noise(0.05, 0.03) is True     # 0.05 < 0.06
    assert paired.within_noise(-0.07, 0.03) is False   # |-0.07| >= 0.06
    assert paired.within_noise(0.06, 0.03) is False    # exactly 2 se is not "under"
    assert paired.within_noise(0.01, None) is None and paired.within_noise(0.01, math.nan) is None
    assert paired.within_noise(0.0, 0.0) is True       # identical runs: no difference at all
