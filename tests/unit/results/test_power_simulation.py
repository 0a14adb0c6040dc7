"""A planned design, checked by simulation: draw the design's outcomes with the target effect many times and
apply the results page's rule (a gain beyond 2 standard errors of the estimate, its se estimated from each
draw); the rule must find the effect in about 80 % of the draws.

Tolerance: the detection rate of R independent draws has a binomial standard deviation
``sqrt(p (1 - p) / R)``; the tests allow 4 of them (a false alarm about once in 16,000 runs) around the
power the design has after rounding its prompts up (at least 80 %, computed here). Seeded, vectorised
with numpy: about a second each.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from ifdistill.results import power

MDE_SE = 2 + NormalDist().inv_cdf(0.8)


def _tolerance(p: float, draws: int) -> float:
    return 4 * math.sqrt(p * (1 - p) / draws)


def test_a_single_seed_design_from_the_discordance():
    """Pilot: 200 prompts against the base, 30 gained and 20 lost. Planned: 8 points. Each draw gives every
    prompt +1 (gained), -1 (lost) or 0 with the pilot's per-prompt variance and a mean of 8 points."""
    n_pilot, gained, lost, effect, draws = 200, 30, 20, 0.08, 4000
    base = {str(i): (int(gained <= i < gained + lost), 1) for i in range(n_pilot)}
    run = {str(i): (int(i < gained), 1) for i in range(n_pilot)}
    design = power.design(power.crossed(power.Arm((run,)), power.Arm((base,), trained=False)), effect, None)
    delta = (gained - lost) / n_pilot
    var = (gained + lost - n_pilot * delta ** 2) / (n_pilot - 1)
    n = math.ceil(MDE_SE ** 2 * var / effect ** 2)
    assert (design["prompts"], design["seeds"]) == (n, 1)
    planned = NormalDist().cdf(effect / math.sqrt(var / n) - 2)  # the power after rounding n up
    assert 0.8 <= planned < 0.81

    p_gain, p_loss = (var + effect ** 2 + effect) / 2, (var + effect ** 2 - effect) / 2
    rng = np.random.default_rng(59)

    def rate(prompts: int) -> float:
        u = rng.random((draws, prompts))
        d = (u < p_gain).astype(float) - ((u >= p_gain) & (u < p_gain + p_loss))
        return float((d.mean(axis=1) >= 2 * d.std(axis=1, ddof=1) / math.sqrt(prompts)).mean())

    found = rate(n)
    print(f"\nsingle seed: {n} prompts detect 8 points in {found:.3f} of {draws} draws (planned {planned:.3f})")
    assert abs(found - planned) <= _tolerance(planned, draws)
    assert rate(n // 2) < 0.8 - _tolerance(0.8, draws)  # half the prompts: clearly short of the power


def _seed_aware_se(y_a: np.ndarray, y_b: np.ndarray) -> np.ndarray:
    """Per draw (axis 0), the standard error of mean(a) - mean(b) from seeds x prompts matrices (axes 1, 2):
    the prompts' variance of the seed-mean difference over n, plus each arm's seed variance over k (two-way
    mean squares, truncated at 0)."""
    n = y_a.shape[2]
    diff = y_a.mean(axis=1) - y_b.mean(axis=1)
    total = diff.var(axis=1, ddof=1) / n
    for y in (y_a, y_b):
        k = y.shape[1]
        seed_means, prompt_means = y.mean(axis=2), y.mean(axis=1)
        ms_seed = n * seed_means.var(axis=1, ddof=1)
        resid = y - prompt_means[:, None, :] - seed_means[:, :, None] + y.mean(axis=(1, 2))[:, None, None]
        ms_inter = (resid ** 2).sum(axis=(1, 2)) / ((n - 1) * (k - 1))
        total = total + np.maximum(0.0, (ms_seed - ms_inter) / n) / k
    return np.sqrt(total)


def test_a_design_with_seeds_from_a_sweep_pilot():
    """Pilot: two setups x 3 seeds on 200 per-document scores, drawn from prompts x seeds with a seed
    spread; planned: 5 points with at most 1,000 prompts. Each draw is the planned design under the pilot's
    estimated variance parts (the plan's assumption), scored with the seed-aware standard error."""
    rng = np.random.default_rng(2026)
    n_pilot, k_pilot, effect, draws = 200, 3, 0.05, 2000

    def setup(mean: float) -> np.ndarray:
        prompts = rng.normal(0, 0.3, n_pilot)
        return mean + prompts[None, :] + rng.normal(0, 0.02, (k_pilot, 1)) + rng.normal(0, 0.2, (k_pilot, n_pilot))

    shared = rng.normal(0, 0.3, n_pilot)  # what both setups find hard
    a, b = setup(0.5) + shared, setup(0.45) + shared
    arms = [power.Arm(tuple({str(i): (float(v), 1) for i, v in enumerate(row)} for row in y)) for y in (a, b)]
    parts = power.crossed(*arms)
    design = power.design(parts, effect, 1000)
    n, k = design["prompts"], design["seeds"]
    assert design["enough"] and k > 1  # the seeds' spread asks for more than one seed

    inter_a, inter_b = parts.inter_var
    seed_a, seed_b = parts.seed_var
    var_d = parts.prompt_var - inter_a / k_pilot - inter_b / k_pilot
    planned_se = math.sqrt(var_d / n + (inter_a + inter_b) / (n * k) + (seed_a + seed_b) / k)
    planned = NormalDist().cdf(effect / planned_se - 2)
    assert 0.8 <= planned < 0.82

    def draw(mean: float, inter: float, seed: float, prompts: np.ndarray) -> np.ndarray:
        return (mean + prompts[:, None, :] + rng.normal(0, math.sqrt(seed), (draws, k, 1))
                + rng.normal(0, math.sqrt(inter), (draws, k, n)))

    prompts = rng.normal(0, math.sqrt(var_d), (draws, n))
    y_a, y_b = draw(effect, inter_a, seed_a, prompts), draw(0.0, inter_b, seed_b, np.zeros((draws, n)))
    estimate = y_a.mean(axis=(1, 2)) - y_b.mean(axis=(1, 2))
    found = float((estimate >= 2 * _seed_aware_se(y_a, y_b)).mean())
    print(f"\nseeds: {k} seeds x {n} prompts detect 5 points in {found:.3f} of {draws} draws (planned {planned:.3f})")
    assert abs(found - planned) <= _tolerance(planned, draws)
