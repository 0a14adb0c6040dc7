"""Statistics on vectors whose answers are known by construction or computed by hand."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from ifdistill.benchmarks.instruction_following.stats import aggregate, per_instruction_type
from ifdistill.statistics import _quantile, binomial_stderr, clustered_ratio_stderr, mcnemar_exact, paired_bootstrap


def scored(ids, strict, loose):
    return {
        "instruction_id_list": ids,
        "strict_inst": strict,
        "loose_inst": loose,
        "strict_prompt": all(strict),
        "loose_prompt": all(loose),
    }


ROWS = [
    scored(["a"], [True], [True]),
    scored(["a", "b"], [True, False], [True, True]),
    scored(["b", "c", "c"], [True, True, True], [True, True, True]),
]


def test_aggregate_values_and_counts():
    agg = aggregate(ROWS)
    assert agg["num_prompts"] == 3 and agg["num_instructions"] == 6
    assert agg["prompt_level_strict_acc"] == pytest.approx(2 / 3)
    assert agg["prompt_level_strict_acc_count"] == 2
    assert agg["inst_level_strict_acc"] == pytest.approx(5 / 6)  # pooled, not mean of rates
    assert agg["prompt_level_loose_acc"] == 1.0 and agg["inst_level_loose_acc"] == 1.0
    assert agg["prompt_level_loose_acc_stderr"] == 0.0
    assert list(agg)[:3] == ["prompt_level_strict_acc", "prompt_level_strict_acc_stderr", "prompt_level_strict_acc_count"]


def test_prompt_level_stderr_is_binomial_with_n_minus_1():
    # 7 of 10: sqrt(0.7 * 0.3 / 9)
    assert binomial_stderr(7, 10) == pytest.approx(math.sqrt(0.21 / 9))
    # equals the sample standard deviation of the 0/1 vector over sqrt(n) (lm-eval's mean_stderr)
    x = [1] * 7 + [0] * 3
    mean = sum(x) / 10
    sample_sd = math.sqrt(sum((v - mean) ** 2 for v in x) / 9)
    assert binomial_stderr(7, 10) == pytest.approx(sample_sd / math.sqrt(10))
    assert math.isnan(binomial_stderr(1, 1))


def test_instruction_level_stderr_is_clustered_by_prompt():
    # prompts with m = 1, 2, 3 instructions of which y = 1, 1, 3 followed (the strict rows above)
    r = Fraction(5, 6)
    residuals = (1 - r * 1) ** 2 + (1 - r * 2) ** 2 + (3 - r * 3) ** 2  # 26/36
    expected = math.sqrt(Fraction(3, 2) * residuals) / 6
    assert clustered_ratio_stderr([1, 1, 3], [1, 2, 3]) == pytest.approx(expected)
    assert aggregate(ROWS)["inst_level_strict_acc_stderr"] == pytest.approx(expected)


def test_clustered_stderr_reduces_to_binomial_with_one_instruction_per_prompt():
    y = [1, 0, 1, 1, 0, 1, 1]
    assert clustered_ratio_stderr(y, [1] * 7) == pytest.approx(binomial_stderr(5, 7))


def test_aggregate_rejects_nothing():
    with pytest.raises(ValueError):
        aggregate([])


def test_per_instruction_type():
    per = per_instruction_type(ROWS)
    assert list(per) == ["a", "b", "c"]
    assert per["a"] == {"strict_acc": 1.0, "loose_acc": 1.0, "count": 2}
    assert per["b"] == {"strict_acc": 0.5, "loose_acc": 1.0, "count": 2}
    assert per["c"]["count"] == 2


def pairs(n11, n10, n01, n00):
    """Paired vectors with n10 prompts passed by a only and n01 by b only."""
    a = [True] * n11 + [True] * n10 + [False] * n01 + [False] * n00
    b = [True] * n11 + [False] * n10 + [True] * n01 + [False] * n00
    return a, b


@pytest.mark.parametrize(
    "n10, n01, p",
    [
        (4, 1, 2 * (1 + 5) / 2**5),  # 0.375
        (10, 0, 2 / 2**10),  # 0.001953125
        (0, 10, 2 / 2**10),
        (3, 3, 1.0),  # 2 * 42/64 > 1 is capped
        (0, 0, 1.0),  # no discordant pair
        (7, 2, 2 * (1 + 9 + 36) / 2**9),  # 0.1796875
    ],
)
def test_mcnemar_exact_by_hand(n10, n01, p):
    a, b = pairs(5, n10, n01, 3)
    result = mcnemar_exact(a, b)
    assert (result["b10"], result["b01"], result["n_discordant"]) == (n10, n01, n10 + n01)
    assert result["p_value"] == pytest.approx(p)


def test_mcnemar_needs_paired_vectors():
    with pytest.raises(ValueError):
        mcnemar_exact([True], [True, False])


def test_paired_bootstrap_covers_the_known_difference():
    # 10 of 100 prompts passed by a only: difference 0.1, se = sqrt(0.1 * 0.9 / 100) = 0.03
    a, b = pairs(50, 10, 0, 40)
    result = paired_bootstrap(a, b, n_resamples=4000, seed=1)
    assert result["difference"] == pytest.approx(0.1)
    assert result["ci_low"] < 0.1 < result["ci_high"]
    # the normal approximation gives 0.1 +- 1.96 * 0.03 = [0.041, 0.159]
    assert 0.02 <= result["ci_low"] <= 0.06
    assert 0.14 <= result["ci_high"] <= 0.18
    assert paired_bootstrap(a, b, n_resamples=4000, seed=1) == result  # reproducible
    assert paired_bootstrap(a, b, n_resamples=4000, seed=2) != result


def test_paired_bootstrap_degenerate_cases():
    same = paired_bootstrap([1, 0, 1], [1, 0, 1], n_resamples=50)
    assert (same["difference"], same["ci_low"], same["ci_high"]) == (0.0, 0.0, 0.0)
    all_a = paired_bootstrap([1] * 5, [0] * 5, n_resamples=50)
    assert (all_a["ci_low"], all_a["ci_high"]) == (1.0, 1.0)
    with pytest.raises(ValueError):
        paired_bootstrap([], [])
    with pytest.raises(ValueError):
        paired_bootstrap([1], [0], confidence=1.5)


def test_quantile_interpolates_linearly():
    assert _quantile([0.0, 1.0, 2.0, 3.0], 0.5) == 1.5
    assert _quantile([0.0, 1.0, 2.0, 3.0], 0.0) == 0.0
    assert _quantile([0.0, 1.0, 2.0, 3.0], 1.0) == 3.0
    assert _quantile([5.0], 0.3) == 5.0
