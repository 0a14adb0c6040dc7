"""How large an effect a comparison can detect, the standard error of seed groups, and the design a target needs.

**The rule and its power.** The results page calls a difference real when ``|delta| >= k * se``
(``k`` = :data:`NOISE_SE`, 2). With the estimate normal around the true effect
``d`` with standard deviation ``se``, the rule finds a gain with probability ``Phi(d / se - k)``; the
*minimum detectable effect* at power ``1 - beta`` is the ``d`` where that probability is ``1 - beta``:

    MDE = (k + z_{1-beta}) * se          80 % power: z = 0.8416, MDE = 2.8416 * se

**Seeds as a noise source** (:func:`crossed`). A setup run with ``k`` seeds, every seed evaluated on the
same ``n`` prompts, is a prompts x seeds crossed design: a prompt's outcome difference is
``d_ri = delta + a_i + s_r + e_ri`` (prompt effect, seed effect, their interaction). The difference of
the group means then has variance ``var(a)/n + var(s)/k + var(e)/(n k)``, estimated without bias from the
two-way mean squares of the per-prompt outcomes (each with its degrees of freedom ``n - 1``, ``k - 1``,
``(n - 1)(k - 1)``: the small-sample correction):

    se^2 = S_D / n  +  sum over arms with k >= 2 of  max(0, MS_seed - MS_inter) / (n k)

- ``S_D``: the sample variance (``n - 1``) over prompts of the difference of the two arms' seed-mean
  outcomes -- with one seed per arm the paired variance of :mod:`ifdistill.results.paired`, so one seed
  gives exactly its paired standard error;
- ``MS_seed = n * sum_r (theta_r - theta)^2 / (k - 1)``: the spread of the seeds' scores ``theta_r``;
- ``MS_inter``: the residual mean square after prompt and seed effects -- the part of the seeds' spread
  that per-prompt noise alone explains, so ``(MS_seed - MS_inter) / n`` estimates the seed variance
  ``var(s)`` (truncated at 0, which errs towards a larger se).

Instruction-level (and any ratio) metrics enter linearised: prompt ``i`` of seed ``r`` contributes
``u_ri = n (y_ri - theta m_i) / M`` (``y`` followed, ``m`` instructions, ``M = sum m``), whose mean over
prompts is ``theta_r - theta``; with one seed this is the cluster-robust ratio standard error of
:func:`ifdistill.statistics.clustered_ratio_stderr`.

**Planning** (:func:`design`): the pilot's components predict the variance of a design with ``n`` prompts
and ``k`` seeds per trained arm, ``V(n, k) = var_D / n + sum_arms (var_e / (n k) + var_s / k)`` with
``var_D = S_D - sum var_e / k_pilot`` (the prompts' own part; for pass/fail outcomes at least
``|effect| (1 - |effect|)`` less the interaction, the least a 0/1 difference with that mean can vary), and
the rule detects ``effect`` at the power when ``(k + z) * sqrt(V) <= effect``. Seeds: the fewest for which
some ``n`` within the benchmark's size does; prompts: the fewest at those seeds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

NOISE_SE = 2.0  # "a difference smaller than 2 standard errors is not meaningful"
POWER = 0.8
#: Seeds :func:`design` tries before it says the target needs more, and the larger seed counts it lists.
MAX_SEEDS = 64
ALTERNATIVES = 2
#: A prompt's (or document's) outcome: ``(followed, instructions)`` -- ``(0 or 1, 1)`` at prompt level, a
#: per-document value and 1 for benchmarks without per-prompt decisions.
Outcomes = Mapping[str, tuple[float, int]]


def z_power(power: float = POWER) -> float:
    """The standard normal quantile at ``power`` (0.8416 at 80 %)."""
    return NormalDist().inv_cdf(power)


def multiplier(threshold: float = NOISE_SE, power: float = POWER) -> float:
    """``threshold + z_power``: the MDE in standard errors (2.8416 for the page's rule at 80 %)."""
    return threshold + z_power(power)


def mde(se: float | None, threshold: float = NOISE_SE, power: float = POWER) -> float | None:
    """The minimum detectable effect of a difference with standard error ``se`` (module docstring)."""
    if se is None or math.isnan(se):
        return None
    return multiplier(threshold, power) * se


@dataclasses.dataclass(frozen=True)
class Arm:
    """One side of a comparison: the outcomes of each of its seeds (one evaluation each), and whether it
    is a trained setup (seeds can be added) or a fixed evaluation (the base model)."""

    seeds: tuple[Outcomes, ...]
    trained: bool = True


@dataclasses.dataclass(frozen=True)
class Components:
    """The difference of two arms' means and the parts of its variance (module docstring)."""

    delta: float
    n: int  # prompts every evaluation of both arms scored
    seeds: tuple[int, int]
    trained: tuple[bool, bool]
    prompt_var: float  # S_D: per-prompt variance of the seed-mean difference
    inter_var: tuple[float | None, float | None]  # MS_inter per arm (None: one seed, not separable)
    seed_var: tuple[float | None, float | None]  # var(s) per arm (None: one seed, not measured)
    discordant: tuple[int, int] | None  # (gained, lost) prompts: one seed per arm and 0/1 outcomes
    binary: bool = False  # every outcome 0 or 1, one per prompt (prompt level)

    @property
    def se(self) -> float:
        spread = sum(v / k for v, k in zip(self.seed_var, self.seeds) if v is not None)
        return math.sqrt(self.prompt_var / self.n + spread)


def _arm_terms(seeds: Sequence[Sequence[float]], n: int) -> tuple[list[float], float | None, float | None]:
    """``(seed-mean u per prompt, MS_inter, seed variance)`` of one arm's linearised outcomes ``u[r][i]``."""
    k = len(seeds)
    mean_u = [sum(u[i] for u in seeds) / k for i in range(n)]
    if k < 2:
        return mean_u, None, None
    offsets = [sum(u) / n for u in seeds]  # theta_r - theta
    ms_seed = n * sum(o * o for o in offsets) / (k - 1)
    resid = sum((u[i] - mean_u[i] - o) ** 2 for u, o in zip(seeds, offsets) for i in range(n))
    ms_inter = resid / ((n - 1) * (k - 1))
    return mean_u, ms_inter, max(0.0, (ms_seed - ms_inter) / n)


def crossed(a: Arm, b: Arm) -> Components | None:
    """``mean(a) - mean(b)`` over the prompts every evaluation of both scored, with its variance parts;
    None under two such prompts."""
    evaluations = [*a.seeds, *b.seeds]
    keys = sorted(set.intersection(*(set(o) for o in evaluations)))
    n = len(keys)
    if n < 2:
        return None
    m = [a.seeds[0][key][1] for key in keys]
    total = sum(m)
    if total == 0:
        return None

    def linearised(arm: Arm) -> tuple[float, list[list[float]]]:
        theta = sum(sum(o[key][0] for key in keys) for o in arm.seeds) / (len(arm.seeds) * total)
        return theta, [[n * (o[key][0] - theta * mi) / total for key, mi in zip(keys, m)] for o in arm.seeds]

    (theta_a, u_a), (theta_b, u_b) = linearised(a), linearised(b)
    mean_a, inter_a, seed_a = _arm_terms(u_a, n)
    mean_b, inter_b, seed_b = _arm_terms(u_b, n)
    prompt_var = sum((x - y) ** 2 for x, y in zip(mean_a, mean_b)) / (n - 1)
    binary = all(x == 1 for x in m) and all(o[key][0] in (0, 1) for o in evaluations for key in keys)
    discordant = None
    if binary and len(a.seeds) == len(b.seeds) == 1:
        pairs = [(a.seeds[0][key][0], b.seeds[0][key][0]) for key in keys]
        discordant = (sum(x > y for x, y in pairs), sum(x < y for x, y in pairs))
    return Components(delta=theta_a - theta_b, n=n, seeds=(len(a.seeds), len(b.seeds)), trained=(a.trained, b.trained),
                      prompt_var=prompt_var, inter_var=(inter_a, inter_b), seed_var=(seed_a, seed_b),
                      discordant=discordant, binary=binary)


def _planned_parts(c: Components, effect: float) -> tuple[float, float, float]:
    """``(var_D, sum var_e, sum var_s)`` a design scales: the prompts' own variance (``S_D`` less the
    interaction the pilot's seeds separated), and the trained arms' interaction and seed variances.

    Pass/fail outcomes bound the variance from below: a difference of 0/1 outcomes with mean ``effect``
    has variance at least ``|effect| (1 - |effect|)`` (every discordant prompt going the effect's way), so
    a pilot with fewer discordant prompts than the effect needs plans with that floor."""
    inter = sum(v / k for v, k in zip(c.inter_var, c.seeds) if v is not None)
    var_d = max(0.0, c.prompt_var - inter)
    if c.binary:
        floor = abs(effect) * (1 - abs(effect))
        var_d = max(var_d, floor - sum(v for v in c.inter_var if v is not None))
    trained_inter = sum(v for v, t in zip(c.inter_var, c.trained) if v is not None and t)
    trained_seed = sum(v for v, t in zip(c.seed_var, c.trained) if v is not None and t)
    return var_d, trained_inter, trained_seed


def planned_se(c: Components, n: int, k: int, effect: float) -> float:
    """The standard error a design of ``n`` prompts and ``k`` seeds per trained arm is expected to have
    when the effect is ``effect``."""
    var_d, inter, seed = _planned_parts(c, effect)
    return math.sqrt(var_d / n + inter / (n * k) + seed / k)


def prompts_needed(c: Components, effect: float, k: int, threshold: float = NOISE_SE,
                   power: float = POWER) -> int | None:
    """The fewest prompts for which ``k`` seeds detect ``effect`` (None: no number of prompts can)."""
    var_d, inter, seed = _planned_parts(c, effect)
    q = multiplier(threshold, power) ** 2
    room = effect ** 2 - q * seed / k
    if room <= 0:
        return None
    return max(2, math.ceil(q * (var_d + inter / k) / room - 1e-9))


def design(c: Components, effect: float, available: int | None, threshold: float = NOISE_SE,
           power: float = POWER, max_seeds: int = MAX_SEEDS) -> dict[str, Any]:
    """The fewest seeds per trained arm for which at most ``available`` prompts (None: no cap) detect
    ``effect`` at ``power``, and the prompts at those seeds (``mde``: what that design detects).

    ``enough`` False when no design within ``max_seeds`` seeds and the available prompts does; then
    ``limit`` says which runs out -- ``"prompts"`` (even all of them, with any number of seeds, detect at
    best ``mde_limit``) or ``"seeds"`` -- and ``mde_all`` is what all the prompts detect with one seed.
    ``prompts_one_seed``: the prompts one seed needs, uncapped (None: no number does); ``more_seeds``: the
    prompts with each of the next :data:`ALTERNATIVES` seed counts (more seeds, fewer prompts)."""
    effect = abs(effect)
    one = prompts_needed(c, effect, 1, threshold, power)
    last = max_seeds if any(c.trained) else 1
    for k in range(1, last + 1):
        n = prompts_needed(c, effect, k, threshold, power)
        if n is not None and (available is None or n <= available):
            more = [{"seeds": j, "prompts": prompts_needed(c, effect, j, threshold, power)}
                    for j in range(k + 1, min(k + ALTERNATIVES, last) + 1)]
            more = [m for m in more if m["prompts"] < n]  # only where more seeds spare prompts
            return {"enough": True, "prompts": n, "seeds": k, "prompts_one_seed": one, "more_seeds": more,
                    "mde": mde(planned_se(c, n, k, effect), threshold, power)}
    n_all = available if available is not None else c.n
    mde_limit = multiplier(threshold, power) * math.sqrt(_planned_parts(c, effect)[0] / n_all)
    return {"enough": False, "prompts": None, "seeds": None, "prompts_one_seed": one, "mde": None,
            "limit": "prompts" if mde_limit >= effect else "seeds", "max_seeds": max_seeds, "available": n_all,
            "mde_all": mde(planned_se(c, n_all, 1, effect), threshold, power), "mde_limit": mde_limit}
