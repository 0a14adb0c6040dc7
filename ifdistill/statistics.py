"""Statistics every benchmark uses: binomial and clustered standard errors, paired tests, bootstrap.

They belong to no benchmark: the instruction benchmarks' aggregates (:mod:`ifdistill.benchmarks.instruction_following.stats`), the judge's win rate
(:mod:`ifdistill.benchmarks.judge.verdicts`) and the results layer's paired comparisons
(:mod:`ifdistill.results.paired`) all read them here.

**Binomial standard error** of a proportion ``p = k / n`` of 0/1 outcomes:

    se(p) = sqrt( p * (1 - p) / (n - 1) )

The divisor is ``n - 1``, not ``n``, so the value equals lm-eval's ``mean`` aggregation (``stdev(x) /
sqrt(n)`` with the sample standard deviation; ``sum((x_i - p)^2) = n p (1 - p)`` for 0/1 data).
``n = 1`` gives ``nan``.

**Clustered ratio standard error** of ``r = sum(y_i) / sum(m_i)`` where cluster ``i`` contributes
``y_i`` successes out of ``m_i`` (outcomes of one cluster share a cause, so they are not independent):
the cluster-robust, linearised ratio estimator with the same ``n / (n - 1)`` correction,

    se(r) = sqrt( n / (n - 1) * sum_i (y_i - r * m_i)^2 ) / sum_i m_i

With ``m_i = 1`` it reduces to the binomial formula above.

**Paired comparisons** of two runs on the same items: :func:`mcnemar_exact` (exact two-sided binomial
test on the discordant pairs) and :func:`paired_bootstrap` (percentile interval of the difference of
means from resampled items).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from typing import Any


def binomial_stderr(successes: int, n: int) -> float:
    """``sqrt(p (1 - p) / (n - 1))`` with ``p = successes / n`` (module docstring)."""
    if n < 2:
        return math.nan
    p = successes / n
    return math.sqrt(p * (1.0 - p) / (n - 1))


def clustered_ratio_stderr(followed: Sequence[int], totals: Sequence[int]) -> float:
    """``sqrt(n/(n-1) * sum (y_i - r m_i)^2) / sum m_i`` with ``r = sum y / sum m``."""
    n = len(totals)
    total = sum(totals)
    if n < 2 or total == 0:
        return math.nan
    r = sum(followed) / total
    residuals = sum((y - r * m) ** 2 for y, m in zip(followed, totals, strict=True))
    return math.sqrt(n / (n - 1) * residuals) / total


def _paired(a: Iterable[Any], b: Iterable[Any]) -> tuple[list[Any], list[Any]]:
    a, b = list(a), list(b)
    if len(a) != len(b):
        raise ValueError(f"paired vectors differ in length: {len(a)} vs {len(b)}")
    return a, b


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    """McNemar's exact test for two paired pass/fail vectors (e.g. prompt-level strict).

    ``b01`` = prompts failed by ``a`` and passed by ``b``; ``b10`` = passed by ``a``, failed by ``b``.
    Under the null (no difference) each of the ``N = b01 + b10`` discordant prompts goes either way
    with probability 1/2, so with ``k = min(b01, b10)``

        p = min(1, 2 * sum_{j=0..k} C(N, j) / 2^N)         (p = 1 when N = 0)
    """
    a, b = _paired(a, b)
    b01 = sum(1 for x, y in zip(a, b) if not x and y)
    b10 = sum(1 for x, y in zip(a, b) if x and not y)
    n = b01 + b10
    if n == 0:
        p_value = 1.0
    else:
        k = min(b01, b10)
        tail = sum(math.comb(n, j) for j in range(k + 1))
        p_value = min(1.0, 2 * tail / 2**n)
    return {"b01": b01, "b10": b10, "n_discordant": n, "p_value": p_value}


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default ``linear`` method)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    *,
    n_resamples: int = 10000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Percentile bootstrap interval of ``mean(a) - mean(b)`` resampling prompts (pairs) together.

    Each resample draws ``n`` prompt indices with replacement (``random.Random(seed)``, so the
    result is reproducible) and computes ``mean(a[idx]) - mean(b[idx])``; the interval is the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of those differences.
    Resampling pairs keeps the per-prompt correlation between the two runs.
    """
    a, b = _paired(a, b)
    n = len(a)
    if n == 0:
        raise ValueError("paired_bootstrap() needs at least one pair")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    diffs = [float(x) - float(y) for x, y in zip(a, b)]
    rng = random.Random(seed)
    choices = rng.choices
    stats = sorted(sum(choices(diffs, k=n)) / n for _ in range(n_resamples))
    alpha = (1.0 - confidence) / 2
    return {
        "difference": sum(diffs) / n,
        "ci_low": _quantile(stats, alpha),
        "ci_high": _quantile(stats, 1.0 - alpha),
        "confidence": confidence,
        "n_resamples": n_resamples,
        "seed": seed,
        "n": n,
    }
