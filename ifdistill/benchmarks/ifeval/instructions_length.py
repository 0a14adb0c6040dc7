"""``length_constraints:*`` instructions: sentences, words, ``***`` paragraphs, nth paragraph's word.

Two different notions of "paragraph" exist in the benchmark and both are reproduced as defined:

* ``number_paragraphs`` splits on the markdown divider ``***`` (the regex ``\\s?\\*\\*\\*\\s?``,
  so ``****`` or ``* * *`` behave as that regex says). An empty piece is tolerated only at the
  very start or end (it is then not counted); an empty piece in the middle fails. Exact count.
* ``nth_paragraph_first_word`` splits on ``"\\n\\n"``; blank pieces are not counted but still
  occupy their position when the nth paragraph is looked up (a blank piece there fails).

Words are ``\\w+`` tokens; sentences are punkt (English) sentences of the raw text.
"""

from __future__ import annotations

import re

from ifdistill.benchmarks.instruction_following import text_analysis
from ifdistill.benchmarks.instruction_following.instruction_base import (
    Instruction,
    InvalidKwargsError,
    compare,
    want_count,
    want_relation,
    want_text,
)

_DIVIDER_RE = re.compile(r"\s?\*\*\*\s?")
# Characters that end the first word of a paragraph (apostrophes and quotes included).
_FIRST_WORD_STOP = frozenset(".,?!'\"")


class NumberOfSentences(Instruction):
    """punkt sentence count ``less than`` / ``at least`` ``num_sentences``."""

    instruction_id = "length_constraints:number_sentences"
    params = ("num_sentences", "relation")

    def __init__(self, *, num_sentences, relation):
        self.num_sentences = want_count("num_sentences", num_sentences)
        self.relation = want_relation("relation", relation)

    def check(self, text: str) -> bool:
        return compare(text_analysis.count_sentences(text), self.relation, self.num_sentences)


class NumberOfWords(Instruction):
    """``\\w+`` token count ``less than`` / ``at least`` ``num_words``."""

    instruction_id = "length_constraints:number_words"
    params = ("num_words", "relation")

    def __init__(self, *, num_words, relation):
        self.num_words = want_count("num_words", num_words)
        self.relation = want_relation("relation", relation)

    def check(self, text: str) -> bool:
        return compare(text_analysis.count_words(text), self.relation, self.num_words)


class NumberOfParagraphs(Instruction):
    """Exactly ``num_paragraphs`` paragraphs separated by ``***`` dividers."""

    instruction_id = "length_constraints:number_paragraphs"
    params = ("num_paragraphs",)

    def __init__(self, *, num_paragraphs):
        self.num_paragraphs = want_count("num_paragraphs", num_paragraphs)

    def check(self, text: str) -> bool:
        pieces = _DIVIDER_RE.split(text)
        last = len(pieces) - 1
        counted = 0
        for index, piece in enumerate(pieces):
            if piece.strip():
                counted += 1
            elif index not in (0, last):
                return False  # an empty paragraph between two dividers
        return counted == self.num_paragraphs


class NthParagraphFirstWord(Instruction):
    """Exactly ``num_paragraphs`` ``"\\n\\n"``-paragraphs, and paragraph ``nth_paragraph`` (1-based)
    starts with ``first_word`` (case-insensitive).

    The first word is the paragraph's first whitespace-separated token with leading ``'`` then
    leading ``"`` removed, cut before the first of ``. , ? ! ' "``; each of its characters is
    lower-cased on its own (as the reference does), and compared to ``first_word.lower()``.
    """

    instruction_id = "length_constraints:nth_paragraph_first_word"
    params = ("num_paragraphs", "nth_paragraph", "first_word")

    def __init__(self, *, num_paragraphs, nth_paragraph, first_word):
        self.num_paragraphs = want_count("num_paragraphs", num_paragraphs, minimum=1)
        self.nth_paragraph = want_count("nth_paragraph", nth_paragraph, minimum=1)
        if self.nth_paragraph > self.num_paragraphs:
            # The reference replaces such an n by a random one.
            raise InvalidKwargsError(
                "nth_paragraph",
                f"must be <= num_paragraphs ({self.num_paragraphs}), got {self.nth_paragraph}",
            )
        self.first_word = want_text("first_word", first_word)
        self._expected = self.first_word.lower()

    def check(self, text: str) -> bool:
        pieces = text.split("\n\n")
        non_blank = sum(1 for p in pieces if p.strip())
        if non_blank != self.num_paragraphs or self.nth_paragraph > non_blank:
            return False
        paragraph = pieces[self.nth_paragraph - 1].strip()
        if not paragraph:
            return False
        word = paragraph.split()[0].lstrip("'").lstrip('"')
        first = []
        for char in word:
            if char in _FIRST_WORD_STOP:
                break
            first.append(char.lower())
        return "".join(first) == self._expected
