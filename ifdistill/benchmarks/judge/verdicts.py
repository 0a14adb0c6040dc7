"""A judge's text to a verdict, strictly; pairs judged in both orders to a win, tie or loss; the aggregates.

Parsing never guesses. A judgement is exactly one of four categories, and each is counted in results.json:

- ``valid``: exactly one verdict marker with an allowed value (a score ``Score: N`` with an integer N in
  ``[score_min, score_max]``; a pairwise ``Verdict: A`` / ``Verdict: B`` / ``Verdict: tie``);
- ``out_of_range``: exactly one marker whose value is not allowed (``Score: 11`` on a 1-10 rubric,
  ``Score: 4.5``, ``Verdict: C``);
- ``missing``: no marker (``Score: four`` is no marker: the value must be a number);
- ``several``: more than one marker, even when they agree -- a judge that writes two scores has not
  given one.

Only ``valid`` judgements enter a score. Markers are case-insensitive (``score:``, ``VERDICT:``), may be
bolded (``**Score:** 4``) and bracketed (``Verdict: [[A]]``).

Both orders (pairwise): each pair is judged with the candidate as response A and the reference as B,
and again with the reference as A. The pair is a *win* only if both judgements prefer the candidate, a
*loss* only if both prefer the reference, otherwise a *tie*; a judge that always prefers the first
position therefore yields only ties (win rate 0.5), never a win. A pair with a judgement that is not
``valid`` in either order is *unparsable*: counted, and left out of the win rate (never made a tie).

Win rate ``(wins + ties / 2) / n`` over the ``n`` parsed pairs, its standard error from the per-pair
values 1, 1/2, 0 (``sqrt(var_{ddof=1} / n)``, the form IFEval's binomial error takes), and a two-sided
exact sign test of wins against losses (ties carry no sign).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from typing import Any, Optional, Sequence

from ifdistill.statistics import mcnemar_exact

JUDGE_MODES = ("absolute", "pairwise")
#: The placeholders each judge template must hold (filled by :func:`ifdistill.benchmarks.judge.run.fill`).
JUDGE_PLACEHOLDERS = {"absolute": ("prompt", "response"), "pairwise": ("prompt", "response_a", "response_b")}
#: Bump when the parsing rules or the both-orders rule change (it enters eval_config_hash).
PARSER_VERSION = "1"
CATEGORIES = ("valid", "out_of_range", "missing", "several")
OUTCOMES = ("win", "tie", "loss", "unparsable")
ORDERS = ("candidate_first", "reference_first")

_SCORE = re.compile(r"(?i)\bscore\s*\**\s*:\s*\**\s*\[*\s*([-+]?\d+(?:\.\d+)?)")
_VERDICT = re.compile(r"(?i)\bverdict\s*\**\s*:\s*\**\s*\[*\s*([A-Za-z]+)")
_PAIR_VALUES = {"A": "A", "B": "B", "TIE": "tie"}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One judgement: its category, the parsed value when valid, and every marker value found."""

    category: str
    value: Any = None
    found: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"category": self.category, "value": self.value, "found": list(self.found)}


def _categorise(found: list[str], parse) -> Verdict:
    if not found:
        return Verdict("missing")
    if len(found) > 1:
        return Verdict("several", None, tuple(found))
    value = parse(found[0])
    return Verdict("valid" if value is not None else "out_of_range", value, tuple(found))


def parse_score(text: str, score_min: int, score_max: int) -> Verdict:
    """An absolute rubric score (module docstring); the value is an ``int``."""
    def parse(token: str) -> Optional[int]:
        if not re.fullmatch(r"[-+]?\d+", token):
            return None
        value = int(token)
        return value if score_min <= value <= score_max else None

    return _categorise(_SCORE.findall(text), parse)


def parse_preference(text: str) -> Verdict:
    """A pairwise preference (module docstring); the value is ``"A"``, ``"B"`` or ``"tie"``."""
    return _categorise(_VERDICT.findall(text), lambda token: _PAIR_VALUES.get(token.upper()))


def pair_outcome(candidate_first: Verdict, reference_first: Verdict) -> str:
    """``win`` / ``tie`` / ``loss`` / ``unparsable`` of one pair judged in both orders (module docstring)."""
    if candidate_first.category != "valid" or reference_first.category != "valid":
        return "unparsable"
    first = {"A": "candidate", "B": "reference", "tie": "tie"}[candidate_first.value]
    second = {"A": "reference", "B": "candidate", "tie": "tie"}[reference_first.value]
    if first == second == "candidate":
        return "win"
    if first == second == "reference":
        return "loss"
    return "tie"


def _mean_se(values: Sequence[float]) -> tuple[Optional[float], Optional[float]]:
    """Mean and ``sqrt(var_{ddof=1} / n)``; None / NaN where there are too few values."""
    n = len(values)
    if n == 0:
        return None, None
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test of ``wins`` against ``losses`` (McNemar's exact test on the discordant pairs)."""
    return mcnemar_exact([True] * wins + [False] * losses, [False] * wins + [True] * losses)["p_value"]


def category_counts(verdicts: Sequence[Verdict]) -> dict[str, int]:
    counts = Counter(v.category for v in verdicts)
    return {c: counts.get(c, 0) for c in CATEGORIES}


def pairwise_metrics(outcomes: Sequence[str], verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """The pairwise aggregates: win rate, its standard error, the sign test, and every count."""
    counts = Counter(outcomes)
    unknown = set(counts) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown pair outcomes {sorted(unknown)}")
    values = [{"win": 1.0, "tie": 0.5, "loss": 0.0}[o] for o in outcomes if o != "unparsable"]
    rate, se = _mean_se(values)
    return {"win_rate": rate, "win_rate_stderr": se, "sign_test_p": sign_test(counts["win"], counts["loss"]),
            "num_pairs": len(outcomes), "num_parsed_pairs": len(values),
            "num_wins": counts["win"], "num_ties": counts["tie"], "num_losses": counts["loss"],
            "num_unparsable_pairs": counts["unparsable"],
            **{f"verdicts_{c}": n for c, n in category_counts(verdicts).items()}}


def absolute_metrics(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """The absolute aggregates: mean score of the valid judgements, its standard error, every count."""
    scores = [float(v.value) for v in verdicts if v.category == "valid"]
    mean, se = _mean_se(scores)
    return {"score_mean": mean, "score_mean_stderr": se, "num_judged": len(verdicts), "num_scored": len(scores),
            "num_unparsable": len(verdicts) - len(scores),
            **{f"verdicts_{c}": n for c, n in category_counts(verdicts).items()}}
