"""Parity of ifdistill's IFEval scorer with the reference, decision by decision.

The oracle is lm-eval 0.4.13's ``lm_eval/tasks/ifeval`` (a port of google's code) with langdetect
seeded, loaded by :func:`tests.parity.ifeval_oracle.load_oracle`. Instructions where lm-eval draws a
random argument (``letter_frequency`` with a non-letter: GPT-4 keys 1122 and 1129) are not compared;
ifdistill counts the literal character there, as google's current code does.
"""

from __future__ import annotations

import importlib.util

import pytest

from ifdistill.benchmarks.instruction_following import aggregate, score_rows
from tests.parity import ifeval_boundary_cases as boundary_cases
from tests.parity.ifeval_oracle import load_oracle, oracle_is_random
from tests.parity.ifeval_reference_data import GPT4_REFERENCE_COUNTS, load_gpt4_rows
from tests.support import compare_with_oracle, require, run_python

REFERENCE_VALUES = {
    "prompt_level_strict_acc": 0.7708,
    "inst_level_strict_acc": 0.8369,
    "prompt_level_loose_acc": 0.7967,
    "inst_level_loose_acc": 0.8561,
}


@pytest.fixture(scope="module")
def oracle():
    require(importlib.util.find_spec("lm_eval") is not None, "lm-eval (dev extra) is not installed")
    return load_oracle()


@pytest.fixture(scope="module")
def gpt4():
    rows = load_gpt4_rows()
    return rows, score_rows(rows, source="gpt4").rows


def compare(oracle, rows, scored):
    """(decisions compared, instructions skipped as random in lm-eval, list of disagreements)."""
    compared, random_ones, _, disagreements = compare_with_oracle(oracle.score, rows, scored, oracle_is_random)
    return compared, random_ones, disagreements


def test_oracle_loads_without_the_heavy_task_package(oracle):
    """load_oracle() imports only lm-eval's IFEval files (not lm_eval.tasks with datasets & co.)
    and leaves no placeholder behind that would break a later real import."""
    proc = run_python(
        """
        import sys
        from tests.parity.ifeval_oracle import load_oracle
        o = load_oracle()
        assert o.score('p', ['punctuation:no_comma'], [{}], 'a b') == ([True], [True])
        print(sorted(m for m in ('lm_eval.tasks', 'datasets', 'transformers', 'torch') if m in sys.modules))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_gpt4_aggregates_equal_the_reference(gpt4):
    rows, scored = gpt4
    assert len(rows) == 541
    agg = aggregate(scored)
    assert (agg["num_prompts"], agg["num_instructions"]) == (541, 834)
    for name, (followed, total) in GPT4_REFERENCE_COUNTS.items():
        assert agg[f"{name}_count"] == followed, name
        assert agg[name] == pytest.approx(followed / total)
        assert round(agg[name], 4) == REFERENCE_VALUES[name]


def test_gpt4_key_2785_is_paired_by_line_and_scored_with_the_input_kwargs(gpt4):
    rows, scored = gpt4
    index = next(i for i, r in enumerate(rows) if r["key"] == 2785)
    assert index == 339
    assert scored[index]["kwargs"][1] == {"num_placeholders": 3}
    assert scored[index]["strict_inst"] == [True, False]
    assert scored[index]["loose_inst"] == [True, False]


def test_gpt4_every_decision_equals_the_oracle(oracle, gpt4):
    rows, scored = gpt4
    compared, random_ones, disagreements = compare(oracle, rows, scored)
    assert disagreements == []
    assert sorted(random_ones) == [(1122, "keywords:letter_frequency"), (1129, "keywords:letter_frequency")]
    assert compared == 2 * (834 - 2)
    # google's deterministic rule (count the literal '#' / '!'): GPT-4 passes both
    for row in scored:
        if row["key"] in (1122, 1129):
            i = row["instruction_id_list"].index("keywords:letter_frequency")
            assert row["strict_inst"][i] and row["loose_inst"][i]


def test_boundary_cases_every_decision_equals_the_oracle(oracle):
    rows = boundary_cases.generate(seed=0)
    scored = score_rows(rows, source="boundary").rows
    compared, random_ones, disagreements = compare(oracle, rows, scored)
    assert random_ones == []
    assert compared == 2 * sum(len(r["instruction_id_list"]) for r in rows)
    assert compared > 6000
    assert disagreements == []
