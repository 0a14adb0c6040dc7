"""IFEval aggregates with standard errors and per-type accuracy (the formulas: :mod:`ifdistill.statistics`).

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

The paired tests of two runs (:func:`~ifdistill.statistics.mcnemar_exact`,
:func:`~ifdistill.statistics.paired_bootstrap`) are re-exported here for the scorer's users.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ifdistill.statistics import binomial_stderr, clustered_ratio_stderr, mcnemar_exact, paired_bootstrap

METRICS = (
    "prompt_level_strict_acc",
    "inst_level_strict_acc",
    "prompt_level_loose_acc",
    "inst_level_loose_acc",
)
__all__ = ["METRICS", "aggregate", "per_instruction_type", "binomial_stderr", "clustered_ratio_stderr",
           "mcnemar_exact", "paired_bootstrap"]


def _rows_of(scored_rows: Any) -> list[Mapping[str, Any]]:
    """Accept a :class:`~ifdistill.benchmarks.instruction_following.scoring.ScoredRows` or a plain list of scored rows."""
    rows = getattr(scored_rows, "rows", scored_rows)
    return list(rows)


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
