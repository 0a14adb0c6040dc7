"""Learning against forgetting across a sweep: the trade-off points and the rank reversals.

Why: the question replay and distillation are asked is a trade -- how much a run gains on the column
it trains for against how much it loses elsewhere -- and the page's table answers it one cell at a
time. Here each run (and, with ``per_checkpoint``, each of its evaluated checkpoints) becomes one point:

- **gain**: the paired delta (run minus base, :func:`ifdistill.results.page.column_delta`) in the page's
  gain column, with its standard error;
- **worst regression**: of the other columns, the one whose paired delta against the base is lowest
  (most negative), with its standard error and its label;
- **verdict**: the page's own rule (:func:`ifdistill.results.verdicts.verdict`) on the same deltas;
- **drift**: KL(base || model) per supervised token on the run's first new-data held-out set at that
  step (:mod:`ifdistill.train.drift`; the latest validation at or before the step), when logged.

Only evaluations with their column's ``eval_config_hash`` (the page's) are compared; the rest are
refused as on the page. Method and replay ratio (``data.ratio``) label the points.

**Rank reversal**: for every column and every step the runs share before their final checkpoint, a pair
of runs is *reversed* when one is ahead at that step and the other ahead at the final checkpoint, each
time by more than the page's noise threshold (default 2 standard errors of the paired difference of the
two runs, prompts/documents matched). The reversal list names each such pair; the rankings at every
step are kept beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ifdistill.benchmarks import registry
from ifdistill.results import run_config
from ifdistill.results.page import Column, PageRow, Samples, column_delta
from ifdistill.results.verdicts import verdict
from ifdistill.results.runs import Evaluation

DRIFT_KEY = "kl_base_model"
RATIO_KEY = "data.ratio"


def evaluation_cell(e: Evaluation, metric: str, column_hash: str | None) -> dict[str, Any]:
    """An evaluation as a page cell (``mismatch`` when its eval config is not the column's)."""
    return {"value": e.metrics[metric], "se": e.metrics.get(f"{metric}_stderr"), "step": e.step,
            "section": e.section, "eval_config_hash": e.eval_config_hash,
            "results_dir": str(e.results_dir) if e.results_dir else None,
            "mismatch": column_hash is not None and e.eval_config_hash != column_hash}


def cells_by_step(row: PageRow, column: Column, column_hash: str | None) -> dict[int | None, dict[str, Any]]:
    """``{step: cell}`` of every evaluation of ``row`` in ``column`` (a base evaluation's step is None)."""
    out: dict[int | None, dict[str, Any]] = {}
    for evals in row.evaluations.values():
        for e in evals:
            if e.benchmark == column.benchmark and column.metric in e.metrics:
                out[e.step] = evaluation_cell(e, column.metric, column_hash)
    return out


def drift_at(row: PageRow, step: int | None) -> float | None:
    """KL(base || model) on the run's first new-data held-out set at ``step`` (or the latest before)."""
    run = row.run
    if run is None or not run.train:
        return None
    sources = ((run.config.get("data") or {}).get("sources") or []) if isinstance(run.config, dict) else []
    first = next((s.get("name") for s in sources if isinstance(s, dict) and s.get("name")), None)
    keys = ([f"val/{first}/{DRIFT_KEY}"] if first else []) + [f"val/*/{DRIFT_KEY}"]
    value, _ = run.train_at(step, keys)
    return value


def _columns(page: dict) -> tuple[list[Column], dict[str, str | None], Column | None]:
    columns = [Column(c["label"], c["benchmark"], c["metric"]) for c in page["columns"]]
    hashes = {c["label"]: c["eval_config_hash"] for c in page["columns"]}
    gain = next((c for c in columns if c.label == page["options"]["gain_column"]), None)
    return columns, hashes, gain


def tradeoff_points(page: dict, rows: Sequence[PageRow], samples: Samples, *,
                    per_checkpoint: bool = False) -> list[dict[str, Any]]:
    """One point per run (its final checkpoint) or per evaluated checkpoint (module docstring)."""
    columns, hashes, gain = _columns(page)
    base = next((r for r in rows if r.kind == "base"), None)
    if gain is None or base is None:
        return []
    k = page["options"]["noise_se"]
    base_cells = {c.label: cells_by_step(base, c, hashes[c.label]) for c in columns}
    base_cells = {label: next(iter(cells.values()), None) for label, cells in base_cells.items()}
    points = []
    for row in rows:
        if row.kind != "run":
            continue
        by_col = {c.label: cells_by_step(row, c, hashes[c.label]) for c in columns}
        steps = sorted(s for s in by_col[gain.label] if s is not None)
        for step in (steps if per_checkpoint else steps[-1:]):
            deltas = {c.label: column_delta(c, by_col[c.label].get(step), base_cells[c.label], samples, k)
                      for c in columns}
            g = deltas[gain.label]
            if g.get("refused"):
                continue
            others = [(c.label, deltas[c.label]) for c in columns if c is not gain and not deltas[c.label].get("refused")]
            worst = min(others, key=lambda x: x[1]["delta"]) if others else None
            points.append({
                "run": row.name, "step": step, "final": step == steps[-1], "method": row.run.method,
                "replay_ratio": run_config.flatten(row.run.config).get(RATIO_KEY),
                "gain": g["delta"], "gain_se": g["se"], "gain_column": gain.label,
                "worst": worst[1]["delta"] if worst else None, "worst_se": worst[1]["se"] if worst else None,
                "worst_column": worst[0] if worst else None,
                "verdict": verdict(columns, gain, deltas)["verdict"], "drift": drift_at(row, step)})
    return points


def _higher_is_better(column: Column) -> bool:
    return registry.get(column.benchmark).higher_is_better


def rank_reversals(page: dict, rows: Sequence[PageRow], samples: Samples) -> dict[str, Any]:
    """``{"rankings": {column: {step: [run, ...]}}, "reversals": [...]}`` (module docstring)."""
    columns, hashes, _ = _columns(page)
    k = page["options"]["noise_se"]
    runs = [r for r in rows if r.kind == "run"]
    rankings: dict[str, dict[str, list[str]]] = {}
    reversals = []
    for col in columns:
        cells = {r.name: {s: c for s, c in cells_by_step(r, col, hashes[col.label]).items()
                          if s is not None and not c["mismatch"]} for r in runs}
        cells = {n: c for n, c in cells.items() if c}
        if len(cells) < 2:
            continue
        final = {n: c[max(c)] for n, c in cells.items()}
        shared = sorted(set.intersection(*(set(c) for c in cells.values())))
        sign = 1 if _higher_is_better(col) else -1
        rankings[col.label] = {str(s): sorted(cells, key=lambda n: -sign * cells[n][s]["value"]) for s in shared}
        rankings[col.label]["final"] = sorted(final, key=lambda n: -sign * final[n]["value"])
        names = sorted(cells)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                at_end = column_delta(col, final[a], final[b], samples, k)
                if at_end.get("refused") or at_end["flat"] is not False:
                    continue
                for step in shared:
                    if step >= min(max(cells[a]), max(cells[b])):
                        continue
                    then = column_delta(col, cells[a][step], cells[b][step], samples, k)
                    if then.get("refused") or then["flat"] is not False or (then["delta"] > 0) == (at_end["delta"] > 0):
                        continue
                    ahead_then, ahead_end = (a, b) if sign * then["delta"] > 0 else (b, a)
                    reversals.append({"column": col.label, "step": step, "ahead_at_step": ahead_then,
                                      "ahead_at_final": ahead_end, "delta_at_step": abs(then["delta"]),
                                      "se_at_step": then["se"], "delta_at_final": abs(at_end["delta"]),
                                      "se_at_final": at_end["se"]})
    return {"rankings": rankings, "reversals": reversals}

