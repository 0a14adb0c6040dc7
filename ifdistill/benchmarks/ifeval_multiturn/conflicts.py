"""Which two IFEval instructions conflict: google's own table, made symmetric.

Two instructions *conflict* when one response cannot be expected to follow both, or when following one
decides the other: google's IFEval (``instruction_following_eval/instructions_registry.py``,
``INSTRUCTION_CONFLICTS`` passed through ``conflict_make``) lists them per instruction, the rule its generator
of instruction combinations follows. The table below is that table for the 25 instructions IFEval's prompts
use; :func:`conflicts` applies ``conflict_make``'s two rules: every instruction conflicts with itself, and a
conflict listed one way holds both ways.

The multi-turn benchmark draws each conversation's new constraint only among the instructions that conflict
with none of turn 1's (:mod:`ifdistill.benchmarks.ifeval_multiturn.conversations`), so the new constraint
never contradicts the old ones by the table's standard. Turn 1 is IFEval's as published: 29 of its 541 prompts
hold a pair the table calls conflicting (mostly one type twice, such as two word counts), so persistence
there is as hard as IFEval's own prompt level. The table knows types, not values: two instructions of
different types whose values contradict (at least 300 words, then fewer than 5 sentences) are not a conflict
by it.
"""

from __future__ import annotations

import functools

_KEYWORD, _LANGUAGE, _LENGTH, _CONTENT = "keywords:", "language:", "length_constraints:", "detectable_content:"
_FORMAT, _COMBINATION, _STARTEND = "detectable_format:", "combination:", "startend:"
_CHANGE_CASES, _PUNCTUATION = "change_case:", "punctuation:"

#: Every IFEval instruction id.
INSTRUCTIONS = (
    _KEYWORD + "existence", _KEYWORD + "frequency", _KEYWORD + "forbidden_words", _KEYWORD + "letter_frequency",
    _LANGUAGE + "response_language", _LENGTH + "number_sentences", _LENGTH + "number_paragraphs",
    _LENGTH + "number_words", _LENGTH + "nth_paragraph_first_word", _CONTENT + "number_placeholders",
    _CONTENT + "postscript", _FORMAT + "number_bullet_lists", _FORMAT + "constrained_response",
    _FORMAT + "number_highlighted_sections", _FORMAT + "multiple_sections", _FORMAT + "json_format",
    _FORMAT + "title", _COMBINATION + "two_responses", _COMBINATION + "repeat_prompt", _STARTEND + "end_checker",
    _CHANGE_CASES + "capital_word_frequency", _CHANGE_CASES + "english_capital",
    _CHANGE_CASES + "english_lowercase", _PUNCTUATION + "no_comma", _STARTEND + "quotation",
)


def _all_but(*kept: str) -> frozenset[str]:
    return frozenset(INSTRUCTIONS) - set(kept)


#: google's table as it lists it (one direction), for the instructions above.
LISTED: dict[str, frozenset[str]] = {
    _KEYWORD + "existence": frozenset({_KEYWORD + "existence"}),
    _KEYWORD + "frequency": frozenset({_KEYWORD + "frequency"}),
    _KEYWORD + "forbidden_words": frozenset({_KEYWORD + "forbidden_words"}),
    _KEYWORD + "letter_frequency": frozenset({_KEYWORD + "letter_frequency"}),
    _LANGUAGE + "response_language": frozenset({
        _LANGUAGE + "response_language", _FORMAT + "multiple_sections", _KEYWORD + "existence",
        _KEYWORD + "frequency", _KEYWORD + "forbidden_words", _STARTEND + "end_checker",
        _CHANGE_CASES + "english_capital", _CHANGE_CASES + "english_lowercase"}),
    _LENGTH + "number_sentences": frozenset({_LENGTH + "number_sentences"}),
    _LENGTH + "number_paragraphs": frozenset({
        _LENGTH + "number_paragraphs", _LENGTH + "nth_paragraph_first_word", _LENGTH + "number_sentences"}),
    _LENGTH + "number_words": frozenset({_LENGTH + "number_words"}),
    _LENGTH + "nth_paragraph_first_word": frozenset({
        _LENGTH + "nth_paragraph_first_word", _LENGTH + "number_paragraphs"}),
    _CONTENT + "number_placeholders": frozenset({_CONTENT + "number_placeholders"}),
    _CONTENT + "postscript": frozenset({_CONTENT + "postscript"}),
    _FORMAT + "number_bullet_lists": frozenset({_FORMAT + "number_bullet_lists"}),
    _FORMAT + "constrained_response": frozenset(INSTRUCTIONS),
    _FORMAT + "number_highlighted_sections": frozenset({_FORMAT + "number_highlighted_sections"}),
    _FORMAT + "multiple_sections": frozenset({
        _FORMAT + "multiple_sections", _LANGUAGE + "response_language", _FORMAT + "number_highlighted_sections"}),
    _FORMAT + "json_format": _all_but(_KEYWORD + "forbidden_words", _KEYWORD + "existence"),
    _FORMAT + "title": frozenset({_FORMAT + "title"}),
    _COMBINATION + "two_responses": _all_but(
        _KEYWORD + "forbidden_words", _KEYWORD + "existence", _LANGUAGE + "response_language", _FORMAT + "title",
        _PUNCTUATION + "no_comma"),
    _COMBINATION + "repeat_prompt": _all_but(_KEYWORD + "existence", _FORMAT + "title", _PUNCTUATION + "no_comma"),
    _STARTEND + "end_checker": frozenset({_STARTEND + "end_checker"}),
    _CHANGE_CASES + "capital_word_frequency": frozenset({
        _CHANGE_CASES + "capital_word_frequency", _CHANGE_CASES + "english_lowercase",
        _CHANGE_CASES + "english_capital"}),
    _CHANGE_CASES + "english_capital": frozenset({_CHANGE_CASES + "english_capital"}),
    _CHANGE_CASES + "english_lowercase": frozenset({
        _CHANGE_CASES + "english_lowercase", _CHANGE_CASES + "english_capital"}),
    _PUNCTUATION + "no_comma": frozenset({_PUNCTUATION + "no_comma"}),
    _STARTEND + "quotation": frozenset({_STARTEND + "quotation", _FORMAT + "title"}),
}


@functools.lru_cache(maxsize=1)
def table() -> dict[str, frozenset[str]]:
    """Each instruction -> every instruction it conflicts with (itself included; symmetric)."""
    out = {iid: set(LISTED.get(iid, ())) | {iid} for iid in INSTRUCTIONS}
    for iid, others in LISTED.items():
        for other in others:
            out[other].add(iid)
    return {iid: frozenset(others) for iid, others in out.items()}


def conflicts(a: str, b: str) -> bool:
    """Whether instructions ``a`` and ``b`` conflict (module docstring); an id outside IFEval's conflicts with
    nothing but itself."""
    return a == b or b in table().get(a, ())
