"""``ifdistill-report plan``: from a pilot, the prompts and seeds a comparison needs to detect an effect.

A pilot is what a study would run anyway, small: a run or a sweep (seed groups) with its base model's
evaluation (``--base-model``). For every comparison (each seed group against the base, or ``--compare
A:B`` between two groups) and every column of the results page, the plan reads the per-prompt outcomes
of the final evaluations (samples.jsonl) and measures:

- the per-prompt variance of the difference (for pass/fail outcomes the discordance: prompts gained and
  lost, variance ``(gained + lost - n delta^2) / (n - 1)``);
- the spread across seeds of each side with two or more seeds (:func:`ifdistill.results.power.crossed`).

From them it gives the fewest seeds per trained setup, and the prompts at those seeds, for which the
results page's rule (a difference beyond 2 standard errors) detects the target effect with 80 % power
(:func:`ifdistill.results.power.design`). Prompts are capped at the benchmark's size -- the rows of the
evaluated data file (``eval.data.path``, else ``fallback_path``), or ``--available`` -- and the plan says
when even all of them are not enough. :data:`ASSUMPTIONS` are printed with every plan.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ifdistill.benchmarks import registry
from ifdistill.evaluator import output as eval_output
from ifdistill.results import page, power
from ifdistill.results import runs as runs_mod
from ifdistill.results.report import group_labels, json_safe
from ifdistill.results.tables import markdown_table

ASSUMPTIONS = (
    "The rule: a difference counts when it exceeds {k:g} standard errors; power {power:.0%}: "
    "MDE = ({k:g} + {z:.4f}) x se.",
    "The per-prompt variance of the difference (pass/fail: the discordance rate minus delta^2) stays at the "
    "pilot's, and the pilot's prompts stand for the benchmark's others.",
    "The spread across seeds stays at the pilot's. A side with one seed has no measured spread: its seeds "
    "are planned as if it had none (a pilot with two or more seeds per setup measures it).",
    "The effect is the one at the pilot's training length: more steps can change discordance and spread.",
    "The base model is one evaluation (it has no seeds); every evaluation scores the same prompts.",
)


def available_prompts(results_dir: str | os.PathLike) -> int | None:
    """The rows of the data file an evaluation read (``config.eval.data.path``, else its ``fallback_path``):
    the benchmark's size when the evaluation took its first ``max_examples``; None when unreadable."""
    raw = eval_output.read_results_json(results_dir)
    data = ((raw.get("config") or {}).get("eval") or {}).get("data") or {}
    for key in ("path", "fallback_path"):
        if data.get(key) and Path(data[key]).is_file():
            with open(data[key]) as f:
                return sum(1 for line in f if line.strip())
    return None


def _tokens_per_prompt(results_dir: str | os.PathLike) -> float | None:
    counts = eval_output.read_results_json(results_dir).get("counts") or {}
    if counts.get("generated_tokens") and counts.get("num_prompts"):
        return counts["generated_tokens"] / counts["num_prompts"]
    return None


class _Side:
    """One side of a comparison: a seed group's rows, or the base row."""

    def __init__(self, label: str, rows: Sequence[page.PageRow]):
        self.label, self.rows = label, list(rows)
        self.trained = rows[0].kind != "base"


def _sides(rows: Sequence[page.PageRow], labels: Mapping[str, str]) -> dict[str, _Side]:
    sides = {}
    if rows and rows[0].kind == "base":
        sides["base"] = _Side("base", rows[:1])
    for group, members in page.group_rows(rows).items():
        label = labels.get(group) or group[:10]
        sides[label] = _Side(label, members)
    return sides


def _side(sides: Mapping[str, _Side], name: str) -> _Side:
    """A side by its label, a run's name (its seed group), a seed group hash's prefix or a unique method."""
    if name in sides:
        return sides[name]
    found = [s for s in sides.values() if any(name in (r.name, r.run and r.run.method) for r in s.rows)
             or (len(name) >= 6 and s.rows[0].run is not None and s.rows[0].run.group_hash.startswith(name))]
    if len(found) == 1:
        return found[0]
    raise KeyError(f"--compare: {name!r} names {'no' if not found else 'more than one'} seed group; have: "
                   + "; ".join(sides))


def _evaluations(side: _Side, column: page.Column) -> list[dict] | None:
    cells = [page.cell(r, column) for r in side.rows]
    return None if any(c is None for c in cells) else cells


def plan_column(a: _Side, b: _Side, column: page.Column, samples: page.Samples, effect: float,
                available: int | None, threshold: float, power_level: float) -> dict[str, Any]:
    """One column of one comparison: the pilot's figures and the design (module docstring); ``problem``
    names why there is none."""
    cells_a, cells_b = _evaluations(a, column), _evaluations(b, column)
    if cells_a is None or cells_b is None:
        return {"problem": "not evaluated on both sides"}
    if len({c["eval_config_hash"] for c in cells_a + cells_b}) > 1:
        return {"problem": "evaluated with different eval configs"}
    outcomes = [[samples.outcomes(c["results_dir"], column) for c in cells] for cells in (cells_a, cells_b)]
    if any(o is None for side in outcomes for o in side):
        return {"problem": "an evaluation has no samples.jsonl"}
    parts = power.crossed(power.Arm(tuple(outcomes[0]), a.trained), power.Arm(tuple(outcomes[1]), b.trained))
    if parts is None:
        return {"problem": "fewer than 2 prompts scored on both sides"}
    fraction = registry.get(column.benchmark).is_fraction(column.metric)
    unit = effect / 100 if fraction else effect
    if available is None:
        available = available_prompts(cells_a[0]["results_dir"])
    tokens = [t for t in (_tokens_per_prompt(c["results_dir"]) for c in cells_a + cells_b) if t is not None]
    note, design = "", power.design(parts, unit, available, threshold, power_level)
    if parts.prompt_var == 0 and not any(parts.seed_var):  # pass/fail outcomes still have the floor (power.py)
        note = "no discordant prompt in the pilot: planned from the least variance the effect has" if parts.binary \
            else "no per-prompt difference in the pilot: nothing to plan from"
        design = design if parts.binary else None
    return {"problem": None, "fraction": fraction, "n": parts.n, "seeds": list(parts.seeds), "delta": parts.delta,
            "se": parts.se, "mde": power.mde(parts.se, threshold, power_level), "discordant": parts.discordant,
            "prompt_var": parts.prompt_var, "seed_sd": [None if v is None else v ** 0.5 for v in parts.seed_var],
            "seed_spread_measured": not any(t and k == 1 for t, k in zip(parts.trained, parts.seeds)),
            "available": available, "tokens_per_prompt": sum(tokens) / len(tokens) if tokens else None,
            "design": design, "note": note}


def build_plan(inputs: Sequence[str | os.PathLike], base_model: str | os.PathLike | None, effect: float, *,
               columns: Sequence[page.Column] | None = None, compare: Sequence[tuple[str, str]] = (),
               available: Mapping[str, int] | None = None, threshold: float = power.NOISE_SE,
               power_level: float = power.POWER, benchmark: str | None = None) -> dict[str, Any]:
    """The plan of a pilot (module docstring); ``effect`` in percentage points for columns of fractions
    (else in the column's unit); ``available``: prompts per column label or benchmark name."""
    if effect <= 0:
        raise ValueError(f"--effect {effect:g}: the target effect must be positive")
    notes: list[str] = []
    base_dirs = runs_mod.base_dirs(base_model)
    resolved = {p.resolve() for p in base_dirs}
    runs = [r for r in runs_mod.load_all(inputs, notes, benchmark) if r.path.resolve() not in resolved]
    rows = page.page_rows(runs, base_dirs)
    chosen = page.select_columns(rows, columns, notes)
    sides = _sides(rows, group_labels(runs))
    if compare:
        pairs = [(_side(sides, x), _side(sides, y)) for x, y in compare]
    elif "base" in sides:
        pairs = [(s, sides["base"]) for s in sides.values() if s.trained]
    else:
        raise ValueError("plan: no comparison -- give the pilot's base evaluation (--base-model) or --compare A:B")
    if not pairs or not chosen:
        raise ValueError("plan: the pilot has no evaluated run" if not pairs else "plan: no column to plan")
    samples, available = page.Samples(), dict(available or {})

    def column(a: _Side, b: _Side, c: page.Column) -> dict[str, Any]:
        prompts = available.get(c.label, available.get(c.benchmark))
        return plan_column(a, b, c, samples, effect, prompts, threshold, power_level)

    comparisons = [{"a": a.label, "b": b.label, "runs": [r.name for r in a.rows + b.rows],
                    "columns": {c.label: column(a, b, c) for c in chosen}} for a, b in pairs]
    z = power.z_power(power_level)
    return {"effect": effect, "power": power_level, "threshold": threshold, "multiplier": threshold + z,
            "assumptions": [a.format(k=threshold, power=power_level, z=z) for a in ASSUMPTIONS],
            "columns": [{"label": c.label, "benchmark": c.benchmark, "metric": c.metric} for c in chosen],
            "comparisons": comparisons, "notes": notes}


def _x(value: float | None, fraction: bool) -> str:
    if value is None:
        return "–"
    return f"{100 * value:.1f}" if fraction else f"{value:.4f}"


def _design_text(c: dict[str, Any], effect: float) -> tuple[str, str, str]:
    """``(prompts, seeds, note)`` of a column's design."""
    d, f = c["design"], c["fraction"]
    unit = " points" if f else ""
    if d is None:
        return "–", "–", c["note"]
    if d["enough"]:
        notes = [c["note"]] if c["note"] else []
        notes += [f"detects {_x(d['mde'], f)}{unit}"] + [f"{m['seeds']} seeds: {m['prompts']} prompts" for m in d["more_seeds"]]
        if not c["seed_spread_measured"]:
            notes.append("seed spread not measured (a trained side has one seed)")
        return str(d["prompts"]), str(d["seeds"]), "; ".join(notes)
    if d["limit"] == "prompts":
        return (f"> {d['available']}", "–", f"even all {d['available']} prompts are not enough: with any number of "
                f"seeds they detect at best {_x(d['mde_limit'], f)}{unit} (one seed: {_x(d['mde_all'], f)}{unit})")
    return (str(d["available"]), f"> {d['max_seeds']}",
            f"the spread across seeds needs more than {d['max_seeds']} seeds for {effect:g}{unit}")


def render_markdown(plan: dict[str, Any]) -> str:
    lines = [f"# Plan: the prompts and seeds to detect {plan['effect']:g} at {plan['power']:.0%} power", "",
             "The effect in percentage points (a column not of fractions: in its own unit). Seeds needed: the fewest "
             "per trained setup with which the benchmark's prompts suffice; prompts needed: the fewest at those seeds.",
             ""]
    header = ["column", "pilot prompts x seeds", "pilot Δ ± se", "pilot MDE", "gained/lost", "seed sd",
              "tokens per response", "prompts available", "prompts needed", "seeds needed", "note"]
    for comp in plan["comparisons"]:
        rows = []
        for label, c in comp["columns"].items():
            if c["problem"]:
                rows.append([label, *["–"] * 9, c["problem"]])
                continue
            f = c["fraction"]
            prompts, seeds, note = _design_text(c, plan["effect"])
            rows.append([label, f"{c['n']} x {'/'.join(map(str, c['seeds']))}",
                         f"{_x(c['delta'], f)} ± {_x(c['se'], f)}", _x(c["mde"], f),
                         "+{}/−{}".format(*c["discordant"]) if c["discordant"] else "–",
                         "/".join(_x(s, f) for s in c["seed_sd"]),
                         "–" if c["tokens_per_prompt"] is None else f"{c['tokens_per_prompt']:.0f}",
                         str(c["available"] or "unknown"),
                         prompts, seeds, note])
        lines += [f"## {comp['a']} vs {comp['b']}", "", *markdown_table(header, rows), ""]
    lines += ["Assumptions:", "", *[f"- {a}" for a in plan["assumptions"]], ""]
    if plan["notes"]:
        lines += ["Notes:", "", *[f"- {n}" for n in plan["notes"]], ""]
    return "\n".join(lines)


def write(plan: dict[str, Any], out_dir: str | os.PathLike) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(json_safe(plan), indent=2) + "\n")
    (out / "plan.md").write_text(render_markdown(plan))
    return [out / "plan.json", out / "plan.md"]
