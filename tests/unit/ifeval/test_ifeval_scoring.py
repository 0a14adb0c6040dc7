"""Strict/loose mechanics, row validation and the shape of scored rows."""

from __future__ import annotations

import dataclasses

import pytest

from ifdistill.benchmarks.instruction_following import (
    SCORER_VERSION,
    InstructionError,
    InvalidRowError,
    Judgement,
    loose_variants,
    score_response,
    score_rows,
)


def row(**overrides):
    base = {
        "key": 7,
        "prompt": "Write without commas.",
        "instruction_id_list": ["punctuation:no_comma"],
        "kwargs": [{}],
        "response": "No commas here",
    }
    base.update(overrides)
    return base


def test_scorer_version_is_a_string():
    assert isinstance(SCORER_VERSION, str) and SCORER_VERSION


def test_loose_variants_are_the_eight_reference_variants_deduplicated():
    response = "Intro line\n*Body* text\nOutro"
    assert loose_variants(response) == [
        response,
        "*Body* text\nOutro",  # without the first line
        "Intro line\n*Body* text",  # without the last line
        "*Body* text",  # without both
        "Intro line\nBody text\nOutro",  # each of the above without "*"
        "Body text\nOutro",
        "Intro line\nBody text",
        "Body text",
    ]


def test_loose_variants_drop_blank_and_duplicate_ones():
    # one line: removing the first or last line leaves nothing; no "*": no starred copies
    assert loose_variants("single") == ["single"]
    # the response itself is not stripped, the line-removed ones are
    assert loose_variants("  a\nb  ") == ["  a\nb  ", "b", "a"]


@pytest.mark.parametrize("response", ["", " ", "\n\t\n"])
def test_blank_response_fails_everything(response):
    # no commas and no words, but the blank guard comes first
    j = score_response(
        response,
        ["punctuation:no_comma", "length_constraints:number_words"],
        [{}, {"num_words": 5, "relation": "less than"}],
    )
    assert j == Judgement([False, False], [False, False], False, False)


def test_instructions_are_judged_independently_in_loose_mode():
    # no_comma passes only without the first line, end_checker only without the last line
    response = "Hi, there\nmiddle\nThe end.\nbye"
    j = score_response(
        response,
        ["punctuation:no_comma", "startend:end_checker"],
        [{}, {"end_phrase": "The end."}],
    )
    assert j.strict_inst == [False, False]
    assert j.loose_inst == [True, True]
    assert (j.strict_prompt, j.loose_prompt) == (False, True)


def test_judgement_is_frozen():
    j = score_response("ok", ["punctuation:no_comma"], [{}])
    with pytest.raises(dataclasses.FrozenInstanceError):
        j.strict_prompt = False  # type: ignore[misc]


def test_none_kwargs_are_dropped_hf_layout():
    hf_kwargs = {"num_words": 3, "relation": "at least", "keywords": None, "language": None}
    j = score_response("one two three", ["length_constraints:number_words"], [hf_kwargs])
    assert j.strict_inst == [True]


def test_score_rows_appends_the_four_fields_in_order_and_keeps_keys():
    rows = [row(), row(key=8, response="a, b", extra={"x": 1})]
    out = score_rows(rows).rows
    assert list(out[0]) == [
        "key", "prompt", "instruction_id_list", "kwargs", "response",
        "strict_inst", "loose_inst", "strict_prompt", "loose_prompt",
    ]  # fmt: skip
    assert out[0]["strict_inst"] == [True] and out[0]["loose_prompt"] is True
    assert out[1]["extra"] == {"x": 1} and out[1]["strict_prompt"] is False
    assert "strict_inst" not in rows[0]  # inputs are not modified


def test_score_rows_replaces_stale_result_fields():
    stale = row(strict_inst=[False], loose_prompt=False)
    out = score_rows([stale]).rows[0]
    assert out["strict_inst"] == [True] and out["loose_prompt"] is True
    assert list(out)[-4:] == ["strict_inst", "loose_inst", "strict_prompt", "loose_prompt"]


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"instruction_id_list": ["punctuation:no_such_thing"]}, "instruction_id_list[0]"),
        ({"kwargs": [{"num_words": 3}]}, "kwargs[0].num_words"),  # no_comma takes no kwargs
        (
            {
                "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
                "kwargs": [{}, {"num_words": "three", "relation": "at least"}],
            },
            "kwargs[1].num_words",
        ),
        (
            {"instruction_id_list": ["length_constraints:number_words"], "kwargs": [{"num_words": 3}]},
            "kwargs[0].relation",
        ),
        ({"kwargs": [{}, {}]}, "kwargs"),  # one entry per instruction
        ({"response": None}, "response"),
        ({"response": 42}, "response"),
        ({"prompt": ["x"]}, "prompt"),
        ({"instruction_id_list": []}, "instruction_id_list"),
    ],
)
def test_invalid_rows_name_line_and_field(bad, field):
    rows = [row(), row(**bad)]
    with pytest.raises(InvalidRowError) as info:
        score_rows(rows, source="in.jsonl")
    err = info.value
    assert (err.source, err.line, err.field) == ("in.jsonl", 2, field)
    assert str(err).startswith(f"in.jsonl:2: field '{field}'")
    assert isinstance(err, ValueError)


@pytest.mark.parametrize("missing", ["prompt", "instruction_id_list", "kwargs", "response"])
def test_missing_field(missing):
    bad = row()
    del bad[missing]
    with pytest.raises(InvalidRowError, match=f"<rows>:1: field '{missing}': missing"):
        score_rows([bad])


def test_skip_invalid_reports_and_counts():
    rows = [row(), row(response=None), row(key=9), row(instruction_id_list=["nope"])]
    result = score_rows(rows, skip_invalid=True)
    assert [r["key"] for r in result.rows] == [7, 9]
    assert [(s.line, s.field) for s in result.skipped] == [(2, "response"), (4, "instruction_id_list[0]")]
    assert all(s.message.startswith("<rows>:") for s in result.skipped)


def test_score_response_raises_instruction_error():
    with pytest.raises(InstructionError) as info:
        score_response("x", ["keywords:existence"], [{"keywords": []}])
    assert info.value.field == "kwargs[0].keywords"


@pytest.mark.parametrize(
    "iid, kwargs",
    [
        ("length_constraints:number_words", {"num_words": -1, "relation": "at least"}),
        ("length_constraints:number_words", {"num_words": True, "relation": "at least"}),
        ("length_constraints:number_words", {"num_words": 3, "relation": "at most"}),
        ("keywords:frequency", {"keyword": "  ", "frequency": 1, "relation": "at least"}),
        ("keywords:existence", {"keywords": "cat"}),
        ("keywords:existence", {"keywords": ["(unclosed"]}),  # keywords are regexes
        ("startend:end_checker", {"end_phrase": ""}),
        ("detectable_content:postscript", {}),
    ],
)
def test_kwargs_that_do_not_fit_are_rejected(iid, kwargs):
    with pytest.raises(InstructionError):
        score_response("text", [iid], [kwargs])
