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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

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
