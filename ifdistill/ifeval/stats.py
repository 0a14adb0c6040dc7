"""IFEval aggregates with standard errors, per-type accuracy, and paired comparisons of two runs.

Notation: prompt ``i = 1..n`` has ``m_i`` instructions of which ``y_i`` are followed; ``x_i`` is 1 when
all of them are (prompt level).

**Prompt level** (``prompt_level_*_acc``): ``p = sum(x_i) / n``, binomial standard error

    se(p) = sqrt( p * (1 - p) / (n - 1) )

The divisor is ``n - 1``, not ``n``, so the value equals what lm-eval prints for these metrics: its
``mean`` aggregation reports ``stdev(x) / sqrt(n)`` with the sample standard deviation (``n - 1``
in the denominator), and ``sum((x_i - p)^2) = n p (1 - p)`` for 0/1 data. The difference from the
``n`` version is a factor ``sqrt(n / (n - 1))`` (0.09 % at n = 541). ``n = 1`` gives ``nan``.

**Instruction level** (``inst_level_*_acc``): pooled over prompts, ``r = sum(y_i) / sum(m_i)`` (not a
mean of per-prompt rates). The instructions of one prompt share a response, so they are not
independent; the standard error is the cluster-robust (linearised ratio estimator) one, clustered
by prompt, with the same ``n / (n - 1)`` correction:

    se(r) = sqrt( n / (n - 1) * sum_i (y_i - r * m_i)^2 ) / sum_i m_i

With one instruction per prompt (``m_i = 1``) this reduces to the prompt-level formula above.
lm-eval reports no standard error for these metrics (its custom aggregation has none).

**Paired comparisons** of two runs on the same prompts: :func:`mcnemar_exact` (exact two-sided
binomial test on the discordant pairs) and :func:`paired_bootstrap` (percentile interval of the
difference of means from resampled prompts).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

METRICS = (
    "prompt_level_strict_acc",
    "inst_level_strict_acc",
    "prompt_level_loose_acc",
    "inst_level_loose_acc",
)


def _rows_of(scored_rows: Any) -> list[Mapping[str, Any]]:
    """Accept a :class:`~ifdistill.ifeval.scoring.ScoredRows` or a plain list of scored rows."""
    rows = getattr(scored_rows, "rows", scored_rows)
    return list(rows)


def binomial_stderr(successes: int, n: int) -> float:
    """``sqrt(p (1 - p) / (n - 1))`` with ``p = successes / n`` (see the module docstring)."""
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


def aggregate(scored_rows: Any) -> dict[str, Any]:
    """The four IFEval metrics (lm-eval's names), their standard errors and the counts.

    Keys: for each metric ``<name>``, ``<name>``, ``<name>_stderr`` and ``<name>_count`` (followed
    prompts / instructions); then ``num_prompts`` and ``num_instructions``.
    """
    rows = _rows_of(scored_rows)
    if not rows:
        raise ValueError("aggregate() needs at least one scored row")
    n = len(rows)
    totals = [len(r["strict_inst"]) for r in rows]
    out: dict[str, Any] = {}
    for mode in ("strict", "loose"):
        prompts = sum(1 for r in rows if r[f"{mode}_prompt"])
        followed = [sum(1 for x in r[f"{mode}_inst"] if x) for r in rows]
        name = f"prompt_level_{mode}_acc"
        out[name] = prompts / n
        out[f"{name}_stderr"] = binomial_stderr(prompts, n)
        out[f"{name}_count"] = prompts
        name = f"inst_level_{mode}_acc"
        out[name] = sum(followed) / sum(totals) if sum(totals) else math.nan
        out[f"{name}_stderr"] = clustered_ratio_stderr(followed, totals)
        out[f"{name}_count"] = sum(followed)
    ordered = {}
    for name in METRICS:
        for suffix in ("", "_stderr", "_count"):
            ordered[name + suffix] = out[name + suffix]
    ordered["num_prompts"] = n
    ordered["num_instructions"] = sum(totals)
    return ordered


def per_instruction_type(scored_rows: Any) -> dict[str, dict[str, Any]]:
    """Per instruction id (sorted): ``strict_acc``, ``loose_acc`` and ``count`` of instructions."""
    counts: dict[str, list[int]] = {}
    for row in _rows_of(scored_rows):
        ids = row["instruction_id_list"]
        for iid, strict, loose in zip(ids, row["strict_inst"], row["loose_inst"], strict=True):
            c = counts.setdefault(iid, [0, 0, 0])
            c[0] += 1
            c[1] += bool(strict)
            c[2] += bool(loose)
    return {
        iid: {"strict_acc": s / n, "loose_acc": lo / n, "count": n}
        for iid, (n, s, lo) in sorted(counts.items())
    }


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
