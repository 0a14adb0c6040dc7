"""Seed replicates of one setup, summarised as mean and spread.

Why: one seed says little when the spread across seeds is as large as the effect being claimed
(the researchers' rule: same config_hash + data revision + seed must reproduce within noise, and a
difference must exceed noise). Runs are grouped by :func:`ifdistill.results.run_config.grouping_hash`
(the config without seed, paths and logging), and for each reported metric at the final checkpoint the
group gets:

- ``mean``: the arithmetic mean over the group's runs;
- ``sd``: the sample standard deviation across seeds (``n - 1`` in the denominator; ``nan`` for one
  run) -- the spread a new seed would show, not the standard error of the mean;
- ``min`` and ``max``.

On the results page a group of two or more seeds is also compared with the base (:func:`group_delta`): the
difference of the group's mean from the base with a standard error that holds both noise sources -- the
prompts' and the seeds' (:func:`ifdistill.results.power.crossed`: the prompts x seeds two-way estimator
with ``n - 1``, ``k - 1`` and ``(n - 1)(k - 1)`` degrees of freedom) -- paired per prompt where every
member and the base have samples.jsonl. Where one lacks them it falls back to
``se = sqrt(sd^2 / k + se_base^2)`` of the members' aggregates (``sd``: across seeds, which holds each
seed's own prompt noise too; ``se_base``: the base's evaluator standard error), marked unpaired.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ifdistill.results import paired, power
from ifdistill.results.runs import Run


def spread(values: Sequence[float]) -> dict[str, float]:
    """``mean``, ``sd`` (n - 1), ``min``, ``max`` and ``n`` of ``values``."""
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": math.nan, "sd": math.nan, "min": math.nan, "max": math.nan}
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan
    return {"n": n, "mean": mean, "sd": sd, "min": min(values), "max": max(values)}


def group_by_seed(runs: Sequence[Run], metrics: Sequence[str] | Mapping[str, tuple[str, str]],
                  extra: dict[str, dict[str, float | None]] | None = None) -> list[dict[str, Any]]:
    """One entry per grouping hash, in order of first appearance, with the spread of each of ``metrics``
    (the report's columns) at the members' final checkpoints: metric names, or ``{column key: (benchmark,
    metric)}`` (a member of another benchmark has no value there).

    ``extra`` maps a run name to further per-run values to summarise the same way (e.g. the final
    teacher-forced accuracy); missing values are left out of that summary.
    """
    groups: dict[str, list[Run]] = {}
    for r in runs:
        if r.final is not None:
            groups.setdefault(r.group_hash, []).append(r)
    out = []
    for group_hash, members in groups.items():
        named = metrics if isinstance(metrics, Mapping) else {m: (None, m) for m in metrics}
        values = {k: [r.final.metric(m) for r in members if bench in (None, r.final.benchmark)]
                  for k, (bench, m) in named.items()}
        stats = {k: spread([v for v in vs if v is not None]) for k, vs in values.items()}
        for key in sorted({k for r in members for k in (extra or {}).get(r.name, {})}):
            values = [(extra or {}).get(r.name, {}).get(key) for r in members]
            stats[key] = spread([v for v in values if v is not None])
        methods = sorted({r.method or "" for r in members})
        out.append({"group_hash": group_hash, "method": ", ".join(m for m in methods if m) or None,
                    "runs": [r.name for r in members], "seeds": [r.seed for r in members],
                    "n": len(members), "stats": stats})
    return out


def group_delta(members: Sequence[Mapping[str, Any] | None], base: Mapping[str, Any] | None,
                outcomes_of: Callable[[str | None], power.Outcomes | None],
                threshold: float = power.NOISE_SE) -> dict[str, Any]:
    """The mean of a seed group's page cells (``members``, one per seed) minus the ``base`` cell, with the
    seed-aware standard error (module docstring): ``{delta, se, se_kind, n, seeds, seed_sd, flat, mde,
    refused}``; ``refused`` names why there is none (a missing cell, another eval config).
    ``outcomes_of``: a cell's ``results_dir`` -> its per-prompt outcomes (None without samples)."""
    if base is None or any(m is None for m in members):
        return {"refused": "missing"}
    if base["mismatch"] or any(m["mismatch"] or m["eval_config_hash"] != base["eval_config_hash"] for m in members):
        return {"refused": "eval config differs"}
    k = len(members)
    seeds = [outcomes_of(m["results_dir"]) for m in members]
    reference = outcomes_of(base["results_dir"])
    parts = power.crossed(power.Arm(tuple(seeds)), power.Arm((reference,), trained=False)) \
        if reference is not None and all(o is not None for o in seeds) else None
    if parts is not None:
        delta, se, kind, n = parts.delta, parts.se, "paired", parts.n
        seed_sd = math.sqrt(parts.seed_var[0]) if parts.seed_var[0] is not None else None
    else:
        values = spread([m["value"] for m in members])
        delta, kind, n, seed_sd = values["mean"] - base["value"], "unpaired", 0, values["sd"]
        se = math.sqrt(values["sd"] ** 2 / k + base["se"] ** 2) if base["se"] is not None else None
    return paired.judged(delta, se, kind, n, threshold, seeds=k, seed_sd=seed_sd)
