"""``keywords:*`` instructions: keyword existence and frequency, forbidden words, letter frequency.

Matching rules that decide parity with the reference:

* Keywords (existence and frequency) are used as **case-insensitive regular expressions without
  word boundaries**: "cat" is found in "Concatenate", and a keyword is not escaped (the benchmark's
  keywords are plain words, so in practice this only matters for substrings).
* Forbidden words are matched case-insensitively **with** ``\\b`` on both sides: "cat" does not
  forbid "cats".
* Letter frequency counts one character in the lower-cased response. lm-eval (and google's older
  code) replace a "letter" that is not a-z by a *random* ASCII letter from the unseeded global
  ``random`` (IFEval keys 1122 ``#`` and 1129 ``!``), so their label depends on process state.
  **ifdistill follows google's current code: the given character, lower-cased, is counted as is.**
"""

from __future__ import annotations

import re

from ifdistill.benchmarks.instruction_following.instruction_base import (
    Instruction,
    InvalidKwargsError,
    compare,
    want_count,
    want_regex,
    want_relation,
    want_text,
    want_text_list,
)


class KeywordExistence(Instruction):
    """Every keyword occurs somewhere in the response (case-insensitive, substrings count)."""

    instruction_id = "keywords:existence"
    params = ("keywords",)

    def __init__(self, *, keywords):
        self.keywords = want_text_list("keywords", keywords)
        self._patterns = tuple(want_regex("keywords", k, re.IGNORECASE) for k in self.keywords)

    def check(self, text: str) -> bool:
        return all(p.search(text) for p in self._patterns)


class KeywordFrequency(Instruction):
    """The keyword occurs ``less than`` / ``at least`` ``frequency`` times.

    Occurrences are non-overlapping regex matches of the stripped keyword, ignoring case.
    """

    instruction_id = "keywords:frequency"
    params = ("keyword", "frequency", "relation")

    def __init__(self, *, keyword, frequency, relation):
        self.keyword = want_text("keyword", keyword, strip=True)
        self.frequency = want_count("frequency", frequency)
        self.relation = want_relation("relation", relation)
        self._pattern = want_regex("keyword", self.keyword, re.IGNORECASE)

    def check(self, text: str) -> bool:
        found = sum(1 for _ in self._pattern.finditer(text))
        return compare(found, self.relation, self.frequency)


class ForbiddenWords(Instruction):
    """None of the words occurs as a whole word (``\\bword\\b``, case-insensitive)."""

    instruction_id = "keywords:forbidden_words"
    params = ("forbidden_words",)

    def __init__(self, *, forbidden_words):
        self.forbidden_words = want_text_list("forbidden_words", forbidden_words)
        self._patterns = tuple(
            want_regex("forbidden_words", r"\b" + w + r"\b", re.IGNORECASE)
            for w in self.forbidden_words
        )

    def check(self, text: str) -> bool:
        return not any(p.search(text) for p in self._patterns)


class LetterFrequency(Instruction):
    """One character occurs ``less than`` / ``at least`` ``let_frequency`` times, ignoring case.

    The response is lower-cased as a whole and the lower-cased ``letter`` is counted in it. Any
    single character is accepted (see the module docstring for why non-letters are not randomised).
    """

    instruction_id = "keywords:letter_frequency"
    params = ("letter", "let_frequency", "let_relation")

    def __init__(self, *, letter, let_frequency, let_relation):
        if not isinstance(letter, str) or len(letter) != 1:
            raise InvalidKwargsError("letter", f"expected a single character, got {letter!r}")
        self.letter = letter
        self.let_frequency = want_count("let_frequency", let_frequency)
        self.let_relation = want_relation("let_relation", let_relation)
        self._needle = letter.lower()

    def check(self, text: str) -> bool:
        # A character whose lower case is two characters (e.g. "İ") can never equal one
        # character of the lowered text, so it counts zero times, as with a Counter lookup.
        found = text.lower().count(self._needle) if len(self._needle) == 1 else 0
        return compare(found, self.let_relation, self.let_frequency)
