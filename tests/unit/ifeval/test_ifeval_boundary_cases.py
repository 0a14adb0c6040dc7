"""The boundary-case generator is deterministic, covers every type and stays where lm-eval is."""

from __future__ import annotations

import pytest

from ifdistill.benchmarks.instruction_following import score_rows
from ifdistill.benchmarks.ifeval.instruction_ids import INSTRUCTION_REGISTRY
from tests.parity import ifeval_boundary_cases as boundary_cases
from tests.parity.ifeval_oracle import oracle_is_random


@pytest.fixture(scope="module")
def rows():
    return boundary_cases.generate()


@pytest.fixture(scope="module")
def scored(rows):
    return score_rows(rows).rows  # raises on any invalid row


def test_same_seed_same_rows_other_seed_other_rows(rows):
    a = boundary_cases.generate(seed=0)
    assert a == rows
    assert a != boundary_cases.generate(seed=1)


def test_a_few_thousand_rows_covering_all_types_and_blanks(rows):
    assert 2500 <= len(rows) <= 5000
    ids = {iid for r in rows for iid in r["instruction_id_list"]}
    assert ids == set(INSTRUCTION_REGISTRY)
    assert any(not r["response"].strip() for r in rows)
    assert any(len(r["instruction_id_list"]) > 1 for r in rows)


def test_every_row_is_valid_and_deterministic_for_the_oracle(rows, scored):
    assert len(scored) == len(rows)
    assert not any(
        oracle_is_random(iid, kw) for r in rows for iid, kw in zip(r["instruction_id_list"], r["kwargs"])
    )


def test_both_outcomes_occur_for_every_type(scored):
    seen = {}
    for r in scored:
        for iid, s, lo in zip(r["instruction_id_list"], r["strict_inst"], r["loose_inst"]):
            seen.setdefault(iid, set()).update({("strict", s), ("loose", lo)})
    for iid, outcomes in seen.items():
        assert outcomes == {("strict", True), ("strict", False), ("loose", True), ("loose", False)}, iid
