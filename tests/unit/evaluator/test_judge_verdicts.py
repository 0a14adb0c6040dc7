"""The judge's verdicts: strict parsing (table), the both-orders pairwise rule with scripted judges, and
the aggregates' standard errors and sign test against values derived independently here."""

from __future__ import annotations

import math
import statistics

import pytest

from ifdistill.benchmarks.judge import verdicts as V
from ifdistill.benchmarks.judge.run import fill, judge_verdict
from ifdistill.benchmarks.judge.settings import JudgeModelSettings, JudgeSettings

# (judge output, category, value) on a 1-10 rubric
SCORES = [
    ("The answer is fine.\nScore: 7", "valid", 7),
    ("score: 1", "valid", 1),
    ("**Score:** 10", "valid", 10),
    ("Score: [[4]]", "valid", 4),
    ("Score: 4/10", "valid", 4),
    ("Score: 11", "out_of_range", None),
    ("Score: 0", "out_of_range", None),
    ("Score: -3", "out_of_range", None),
    ("Score: 4.5", "out_of_range", None),
    ("", "missing", None),
    ("A good answer, I would give it 8.", "missing", None),
    ("Score: four", "missing", None),
    ("Scored: 5", "missing", None),
    ("Score: 4\nOn reflection, Score: 6", "several", None),
    ("Score: 5\nScore: 5", "several", None),  # agreeing markers are still two scores
    ("Score: 12\nScore: 3", "several", None),
]

# (judge output, category, value)
PREFERENCES = [
    ("A is better.\nVerdict: A", "valid", "A"),
    ("verdict: b", "valid", "B"),
    ("**Verdict:** [[B]]", "valid", "B"),
    ("Verdict: tie", "valid", "tie"),
    ("Verdict: TIE", "valid", "tie"),
    ("Verdict: C", "out_of_range", None),
    ("Verdict: Answer A", "out_of_range", None),
    ("Answer A is better.", "missing", None),
    ("", "missing", None),
    ("Verdict: A\nVerdict: B", "several", None),
    ("Verdict: A. Final verdict: A", "several", None),
]


@pytest.mark.parametrize("text,category,value", SCORES)
def test_score_parsing(text, category, value):
    v = V.parse_score(text, 1, 10)
    assert (v.category, v.value) == (category, value)


@pytest.mark.parametrize("text,category,value", PREFERENCES)
def test_preference_parsing(text, category, value):
    v = V.parse_preference(text)
    assert (v.category, v.value) == (category, value)


def test_only_valid_scores_count_and_every_category_is_counted():
    verdicts = [V.parse_score(text, 1, 10) for text, _, _ in SCORES]
    m = V.absolute_metrics(verdicts)
    valid = [value for _, category, value in SCORES if category == "valid"]
    assert m["num_scored"] == len(valid) and m["num_unparsable"] == len(SCORES) - len(valid)
    for category in V.CATEGORIES:
        assert m[f"verdicts_{category}"] == sum(1 for _, c, _ in SCORES if c == category)
    # statistics.stdev is the sample (n-1) standard deviation: se = stdev / sqrt(n); exact to rounding (1e-12)
    assert m["score_mean"] == pytest.approx(statistics.mean(valid), abs=1e-12)
    assert m["score_mean_stderr"] == pytest.approx(statistics.stdev(valid) / math.sqrt(len(valid)), abs=1e-12)


TEMPLATE = "Q: {prompt}\nA: {response_a}\nB: {response_b}"
CANDIDATES = [f"candidate answer {i}" for i in range(6)]
REFERENCES = [f"reference answer {i}" for i in range(6)]


def _judge_pairs(judge) -> list[str]:
    """Each pair judged in both orders by ``judge(filled prompt) -> text``; the pair outcomes."""
    outcomes = []
    for cand, ref in zip(CANDIDATES, REFERENCES):
        first = V.parse_preference(judge(fill(TEMPLATE, prompt="p", response_a=cand, response_b=ref)))
        second = V.parse_preference(judge(fill(TEMPLATE, prompt="p", response_a=ref, response_b=cand)))
        outcomes.append(V.pair_outcome(first, second))
    return outcomes


def _prefers(word: str):
    """A judge that prefers whichever position holds a response containing ``word``."""
    return lambda text: "Verdict: A" if word in text.split("\nB:")[0] else "Verdict: B"


JUDGES = {
    # name: (judge, expected outcome of every pair)
    "always position one": (lambda text: "Verdict: A", "tie"),
    "always position two": (lambda text: "Verdict: B", "tie"),
    "always the candidate": (_prefers("candidate"), "win"),
    "always the reference": (_prefers("reference"), "loss"),
    "always a tie": (lambda text: "Verdict: tie", "tie"),
    "unparsable": (lambda text: "Both answers have merits.", "unparsable"),
}


@pytest.mark.parametrize("name", list(JUDGES))
def test_both_orders_rule(name):
    judge, expected = JUDGES[name]
    outcomes = _judge_pairs(judge)
    assert outcomes == [expected] * len(CANDIDATES)
    m = V.pairwise_metrics(outcomes, [])
    n = len(outcomes)
    if expected == "unparsable":  # counted, never turned into ties
        assert m["num_unparsable_pairs"] == n and m["num_parsed_pairs"] == 0 and m["win_rate"] is None
        return
    assert m["win_rate"] == {"win": 1.0, "tie": 0.5, "loss": 0.0}[expected]
    assert m["win_rate_stderr"] == 0.0  # every pair the same value
    # sign test: with only wins (or only losses), p = 2 * (1/2)^n; with only ties nothing is signed: p = 1
    assert m["sign_test_p"] == pytest.approx(1.0 if expected == "tie" else 2 * 0.5 ** n, rel=1e-12)


def test_position_bias_never_wins_even_when_mixed_with_real_preferences():
    """A judge that prefers position one on half the pairs and the candidate on the rest: only the latter win."""
    outcomes = [V.pair_outcome(V.parse_preference("Verdict: A"), V.parse_preference("Verdict: A"))] * 3 + \
               [V.pair_outcome(V.parse_preference("Verdict: A"), V.parse_preference("Verdict: B"))] * 3
    assert outcomes == ["tie"] * 3 + ["win"] * 3
    assert V.pairwise_metrics(outcomes, [])["win_rate"] == pytest.approx((3 + 3 / 2) / 6, abs=1e-12)


def test_one_unparsable_order_makes_the_pair_unparsable():
    valid, missing = V.parse_preference("Verdict: A"), V.parse_preference("no verdict")
    assert V.pair_outcome(valid, missing) == V.pair_outcome(missing, valid) == "unparsable"


def test_win_rate_standard_error_and_sign_test():
    outcomes = ["win"] * 8 + ["loss"] * 2 + ["tie"] * 3 + ["unparsable"] * 2
    m = V.pairwise_metrics(outcomes, [])
    values = [1.0] * 8 + [0.0] * 2 + [0.5] * 3
    assert (m["num_wins"], m["num_losses"], m["num_ties"], m["num_unparsable_pairs"]) == (8, 2, 3, 2)
    assert m["num_pairs"] == 15 and m["num_parsed_pairs"] == 13
    assert m["win_rate"] == pytest.approx(statistics.mean(values), abs=1e-12)
    assert m["win_rate_stderr"] == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)), abs=1e-12)
    # exact two-sided binomial(10, 1/2) tail: 2 * (C(10,0) + C(10,1) + C(10,2)) / 2^10
    assert m["sign_test_p"] == pytest.approx(2 * (1 + 10 + 45) / 1024, rel=1e-12)


def test_fill_replaces_placeholders_once():
    text = fill(TEMPLATE, prompt="{response_b}", response_a="a {prompt}", response_b="b")
    assert text == "Q: {response_b}\nA: a {prompt}\nB: b"
    assert fill("{x} {prompt}", prompt="p") == "{x} p"


@pytest.mark.parametrize("thinking,text,category,value", [
    (True, "<think>Score: 3? No.</think>\n\nScore: 8", "valid", 8),
    (False, "<think>Score: 3? No.</think>\n\nScore: 8", "several", None),  # the think block is text too
    (True, "<think>Score: 3, then I ran out of tokens", "missing", None),  # no answer after thinking
    (True, "Score: 6", "valid", 6),  # no think block: the whole answer
])
def test_a_thinking_judge_is_read_after_its_think_block(thinking, text, category, value):
    settings = JudgeSettings(model=JudgeModelSettings(enable_thinking=thinking))
    v = judge_verdict(settings, text)
    assert (v.category, v.value) == (category, value)
