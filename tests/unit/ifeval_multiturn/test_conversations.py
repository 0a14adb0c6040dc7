"""The multi-turn benchmark's conversations: IFEval's conflict table, the wordings, the deterministic build
from IFEval's prompts and GPT-4's responses, and the published IFBench multi-turn layout read as it is."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from ifdistill.benchmarks.instruction_following.scoring import build_instructions, score_response
from ifdistill.benchmarks.ifeval_multiturn import conflicts, conversations
from ifdistill.benchmarks.ifeval_multiturn.benchmark import conversation_scores
from ifdistill.benchmarks.ifeval_multiturn.wording import TURN, WORDINGS
from ifdistill.data.sources import SourceSpec, load_source
from ifdistill.paths import shared_data_dir

IFEVAL = shared_data_dir() / "ifeval" / "input_data.jsonl"
GPT4 = shared_data_dir() / conversations.GPT4_RESPONSES


@pytest.fixture(scope="module")
def ifeval_rows():
    return load_source(SourceSpec(name="ifeval", path=str(IFEVAL), layout="ifeval", need_completion=False)).examples


@pytest.fixture(scope="module")
def built(ifeval_rows):
    return conversations.build(ifeval_rows, seed=0, instructions=[], responses=GPT4)


def test_the_conflict_table_is_googles_made_symmetric():
    table = conflicts.table()
    assert set(table) == set(conflicts.INSTRUCTIONS) and len(table) == 25
    for a, b in itertools.product(conflicts.INSTRUCTIONS, repeat=2):
        assert conflicts.conflicts(a, b) == conflicts.conflicts(b, a)  # conflict_make: both ways
    assert all(conflicts.conflicts(a, a) for a in conflicts.INSTRUCTIONS)  # ... and with itself
    # entries as google lists them, one way only: the symmetric closure adds the other
    assert "detectable_format:title" in conflicts.LISTED["startend:quotation"]
    assert "startend:quotation" not in conflicts.LISTED["detectable_format:title"]
    assert conflicts.conflicts("detectable_format:title", "startend:quotation")
    # constrained_response conflicts with every instruction; json_format with all but two keyword types
    assert all(conflicts.conflicts("detectable_format:constrained_response", i) for i in conflicts.INSTRUCTIONS)
    free_of_json = {i for i in conflicts.INSTRUCTIONS if not conflicts.conflicts("detectable_format:json_format", i)}
    assert free_of_json == {"keywords:existence", "keywords:forbidden_words"}
    assert not conflicts.conflicts("punctuation:no_comma", "keywords:existence")


@pytest.mark.parametrize("iid", sorted(WORDINGS))
def test_every_wording_states_kwargs_ifevals_checker_accepts(iid):
    """Drawn kwargs build IFEval's own checker of the id (the scorer's validation), and every value drawn is
    in the sentence that asks for it (a language by its name)."""
    for seed in range(20):
        kwargs, text = WORDINGS[iid].make(conversations.item_rng(seed, "k"))
        build_instructions([iid], [kwargs])
        assert text.startswith(TURN.format(instruction="")) and "{" not in text.replace("{}", "")
        names = {"de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "pt": "Portuguese"}
        for value in kwargs.values():
            for item in value if isinstance(value, list) else [value]:
                assert str(names.get(item, item)) in text, (iid, kwargs, text)


def test_wordings_avoid_the_types_ifeval_has_conflict_with_nearly_everything():
    assert set(WORDINGS) <= set(conflicts.INSTRUCTIONS)
    assert not set(WORDINGS) & {"detectable_format:constrained_response", "combination:two_responses",
                                "combination:repeat_prompt"}


def test_a_conversation_is_turn_1_gpt4s_response_and_a_new_non_conflicting_constraint(ifeval_rows, built):
    responses = [json.loads(line) for line in GPT4.read_text().splitlines()]
    by_prompt = {r["prompt"]: r["response"] for r in responses}
    rows = {r.key: r for r in ifeval_rows}
    assert len(built.examples) + len(built.skipped) == 541
    for ex in built.examples:
        first = rows[ex.key]
        user1, assistant, user3 = ex.messages
        assert (user1["role"], assistant["role"], user3["role"]) == ("user", "assistant", "user")
        assert user1["content"] == first.prompt
        turn1 = first.instruction_id_list
        assert ex.instruction_id_list[:-1] == turn1 and ex.kwargs[:-1] == first.kwargs
        assert built.carried[ex.key] == len(turn1)
        new = ex.instruction_id_list[-1]
        assert new in WORDINGS and not any(conflicts.conflicts(new, t) for t in turn1)
        assert user3["content"].startswith("Please revise your answer. ")
        if ex.key != "2785":
            assert assistant["content"] == by_prompt[first.prompt]
    # prompt 2785's GPT-4 response answers an older wording: paired by position, as the reference pairs it
    (ex,) = [e for e in built.examples if e.key == "2785"]
    index = [r.key for r in ifeval_rows].index("2785")
    assert responses[index]["prompt"] != rows["2785"].prompt and rows["2785"].prompt not in by_prompt
    assert ex.messages[1]["content"] == responses[index]["response"]


def test_rows_left_without_a_conversation_are_those_every_wording_conflicts_with(ifeval_rows, built):
    rows = {r.key: r for r in ifeval_rows}
    assert built.skipped and len(set(built.skipped)) == len(built.skipped)
    for key in built.skipped:
        assert all(any(conflicts.conflicts(w, t) for t in rows[key].instruction_id_list) for w in WORDINGS), key


def test_conversations_are_seeded_per_item_and_independent_of_the_other_rows(ifeval_rows, built):
    again = conversations.build(ifeval_rows, seed=0, instructions=[], responses=GPT4)
    assert again.examples == built.examples
    part = conversations.build(ifeval_rows[200:230], seed=0, instructions=[], responses=GPT4)
    assert part.examples == [e for e in built.examples if e.key in {r.key for r in ifeval_rows[200:230]}]
    other = conversations.build(ifeval_rows, seed=1, instructions=[], responses=GPT4)
    changed = sum(a.messages[-1] != b.messages[-1] for a, b in zip(built.examples, other.examples))
    assert changed > len(built.examples) // 2  # 21 types: another seed redraws most items
    only = conversations.build(ifeval_rows[:40], seed=0, instructions=["punctuation:no_comma"], responses=GPT4)
    assert {e.instruction_id_list[-1] for e in only.examples} == {"punctuation:no_comma"}
    assert not any("punctuation:no_comma" in e.instruction_id_list[:-1] for e in only.examples)


def test_conversation_scores_isolation_and_persistence():
    # two instructions from turn 1, the new one last
    assert conversation_scores(2, [True, True, True], [True, True, True]) == {
        "isolation_strict_acc": 1.0, "persistence_strict_acc": 1.0, "isolation_loose_acc": 1.0,
        "persistence_loose_acc": 1.0}
    assert conversation_scores(2, [True, False, True], [True, True, True])["persistence_strict_acc"] == 0.0
    assert conversation_scores(2, [True, True, False], [True, True, True])["isolation_strict_acc"] == 0.0
    # a published conversation: every instruction is the final turn's, no persistence
    assert conversation_scores(0, [True, False], [True, True]) == {"isolation_strict_acc": 0.0,
                                                                  "isolation_loose_acc": 1.0}


def _published_rows() -> list[dict]:
    """Rows in allenai/IFBench_multi-turn's layout: an int key, the single-turn ``prompt``, the final turn's
    instruction ids and kwargs (every possible kwarg, unused ones null) and ``messages`` user / assistant / user."""
    nulls = {"N": None, "small_n": None, "percentage": None, "word": None, "sep": None, "n": None, "m": None,
             "keyword": None, "min_words": None, "max_words": None, "num_words": None, "relation": None}
    return [
        {"key": 7, "prompt": "Write a poem about the sea. Use fewer than 40 words.",
         "instruction_id_list": ["length_constraints:number_words"],
         "kwargs": [{**nulls, "num_words": 40, "relation": "less than"}],
         "messages": [{"role": "user", "content": "Write a poem about the sea."},
                      {"role": "assistant", "content": "The sea, the sea, it rolls and sighs ..."},
                      {"role": "user", "content": "Rewrite it. Use fewer than 40 words."}]},
        {"key": 8, "prompt": "List three fruits. Answer with between 10 and 20 words.",
         "instruction_id_list": ["count:word_count_range"],
         "kwargs": [{**nulls, "min_words": 10, "max_words": 20}],
         "messages": [{"role": "user", "content": "List three fruits."},
                      {"role": "assistant", "content": "Apples, pears and plums."},
                      {"role": "user", "content": "Answer with between 10 and 20 words."}]},
    ]


def test_the_published_multi_turn_layout_is_read_as_a_conversation(tmp_path):
    path = tmp_path / "IFBench_multi-turn.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _published_rows()))
    examples = load_source(SourceSpec(name="mt", path=str(path), layout="ifeval", need_completion=False)).examples
    assert [e.key for e in examples] == ["7", "8"]
    assert examples[0].messages == tuple(_published_rows()[0]["messages"])
    assert examples[0].prompt == "Rewrite it. Use fewer than 40 words."  # the final user turn, not the row's prompt
    assert examples[1].instruction_id_list == ("count:word_count_range",)
    assert examples[1].kwargs == ({"min_words": 10, "max_words": 20},)  # the nulls dropped
    auto = load_source(SourceSpec(name="mt", path=str(path), layout="auto", need_completion=False)).examples
    assert auto == examples
    made = conversations.build(examples, seed=0, instructions=[], responses=tmp_path / "never_read.jsonl")
    assert made.examples == examples and made.carried == {"7": 0, "8": 0} and made.responses is None
    # the final reply is scored on the final turn's instructions: IFBench's checker counts its words
    reply = "Apples are sweet, pears are soft, and plums are dark purple in late summer."
    assert score_response(reply, ["count:word_count_range"], [dict(examples[1].kwargs[0])]).strict_prompt


def test_a_mix_of_single_turn_rows_and_conversations_is_refused(tmp_path, ifeval_rows):
    path = tmp_path / "mt.jsonl"
    path.write_text(json.dumps(_published_rows()[0]) + "\n")
    published = load_source(SourceSpec(name="mt", path=str(path), layout="ifeval", need_completion=False)).examples
    with pytest.raises(conversations.ConversationError, match=r"mixes single-turn rows .* with conversations"):
        conversations.build([*ifeval_rows[:2], *published], seed=0, instructions=[], responses=GPT4)


def test_a_responses_file_without_a_response_for_a_row_is_named(tmp_path, ifeval_rows):
    short = tmp_path / "responses.jsonl"
    short.write_text(json.dumps({"prompt": "something else", "response": "x"}) + "\n")
    with pytest.raises(conversations.ConversationError, match=re.escape(f"{short}: no response to row")):
        conversations.build(ifeval_rows[:3], seed=0, instructions=[], responses=short)
    short.write_text("not json\n")
    with pytest.raises(conversations.ConversationError, match=re.escape(f"{short}:1: invalid JSON")):
        conversations.build(ifeval_rows[:3], seed=0, instructions=[], responses=short)


def test_the_shared_responses_are_the_published_file():
    assert Path(GPT4).is_file() and len(GPT4.read_text().splitlines()) == 541
