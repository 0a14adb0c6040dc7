"""The results page's rule: a verdict per row (or seed group) against the base, from its deltas.

- **wins**: a gain in the gain column beyond the noise threshold (``flat`` False) and no other column
  worse beyond it (each column in its better direction,
  :meth:`~ifdistill.benchmarks.base.Benchmark.is_higher_better`);
- **forgetting**: the gain with such a regression (named: ``down: ...``);
- **unverified gain**: the gain with other columns missing or evaluated with another eval config (named);
- without a gain, what the comparison could have seen decides between two verdicts: the gain column's
  minimum detectable effect at 80 % power (``mde``, :mod:`ifdistill.results.power`) against the *target
  effect* -- the size of difference the comparison is for, default :data:`DEFAULT_TARGET_POINTS` for a
  column of fractions (the published comparisons argue about differences of 2-5 points: SFT against ICL
  distillation 3.7 points of IFEval prompt strict at step 1000, ../shared/context.md):
  - **no clear gain** (``could have detected >= MDE``): the MDE is at most the target, so an effect of the
    size that matters would most likely have shown;
  - **underpowered** (``effects under MDE are invisible here``): the MDE is larger; a flat result says
    nothing about effects of the target's size.
  A column not of fractions has no default target (its unit is its own): there the verdict is ``no clear
  gain`` with the MDE beside it, unless a target is given.

Columns are the page's (:class:`ifdistill.results.page.Column`: ``label``, ``benchmark``, ``metric``);
deltas its ``{delta, se, flat, mde, refused}`` (:func:`ifdistill.results.page.column_delta`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ifdistill.benchmarks import registry

#: The target effect of a column of fractions, in percentage points.
DEFAULT_TARGET_POINTS = 5.0


def _better(column: Any, delta: float) -> float:
    """``delta`` signed so that positive is better (:meth:`~ifdistill.benchmarks.base.Benchmark.is_higher_better`)."""
    return delta if registry.get(column.benchmark).is_higher_better(column.metric) else -delta


def _display(column: Any, value: float) -> tuple[float, str]:
    """``value`` in ``column``'s display unit and that unit's name: percentage points for fractions."""
    return (100 * value, " points") if registry.get(column.benchmark).is_fraction(column.metric) else (value, "")


def target_effect(gain: Any, target: float | None) -> float | None:
    """The line between "no clear gain" and "underpowered" in ``gain``'s display unit: ``target``, else
    :data:`DEFAULT_TARGET_POINTS` for a column of fractions, else none."""
    if target is not None or gain is None:
        return target
    return DEFAULT_TARGET_POINTS if registry.get(gain.benchmark).is_fraction(gain.metric) else None


def _power_note(gain: Any, mde: float | None, target: float | None) -> tuple[str, str]:
    """``(verdict, note)`` of a delta without a gain: ``no clear gain`` when the MDE is at most the target
    effect (:func:`target_effect`), else ``underpowered``."""
    if mde is None:
        return "no clear gain", ""
    x, unit = _display(gain, mde)
    target = target_effect(gain, target)
    text = f"{x:.1f}{unit}" if unit else f"{x:.4g}"
    if target is not None and x > target:
        return "underpowered", f"effects under {text} are invisible here"
    return "no clear gain", f"could have detected >= {text}"


def verdict(columns: Sequence[Any], gain: Any, deltas: dict[str, dict],
             target: float | None = None) -> dict[str, Any]:
    g = deltas[gain.label]
    if g.get("refused"):
        return {"verdict": "—", "note": f"no {gain.label} against base ({g['refused']})"}
    gained = _better(gain, g["delta"]) > 0 and g["flat"] is False
    down = [c.label for c in columns if c is not gain and not deltas[c.label].get("refused")
            and _better(c, deltas[c.label]["delta"]) < 0 and deltas[c.label]["flat"] is False]
    untested = [c.label for c in columns if c is not gain and deltas[c.label].get("refused")]
    verdict, power_note = ("forgetting" if down else "unverified gain" if untested else "wins", "") if gained \
        else _power_note(gain, g.get("mde"), target)
    notes = ([power_note] if power_note else []) + ([f"down: {', '.join(down)}"] if down and gained else []) + \
            ([f"untested: {', '.join(untested)}"] if untested else [])
    return {"verdict": verdict, "note": "; ".join(notes)}


def verdict_text(v: dict[str, Any] | None) -> str:
    """A verdict as the tables print it: ``no clear gain (could have detected >= 11.9 points)``,
    ``underpowered: effects under 11.9 points are invisible here``, ``forgetting (down: GSM8K strict)``."""
    if v is None:
        return "—"
    if v["verdict"] == "underpowered":
        first, _, rest = v["note"].partition("; ")
        return f"underpowered: {first}" + (f" ({rest})" if rest else "")
    return v["verdict"] + (f" ({v['note']})" if v["note"] else "")
