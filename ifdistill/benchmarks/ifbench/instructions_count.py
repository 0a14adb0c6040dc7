"""IFBench's ``count:*`` and ``ratio:*`` constraints.

Rules that decide parity with the reference (allenai/IFBench ``instructions.py``):

* "Words" mean different things per constraint, each kept as defined: ``\\w+`` tokens
  (``word_count_range``, ``stop_words``), whitespace-split pieces with ASCII punctuation stripped at
  their ends (``unique_word_count``, ``conjunctions``, ``words_japanese``), or with all ASCII
  punctuation deleted first (``numbers``, ``pronouns``).
* ``conjunctions`` counts *distinct raw pieces*: "and" and "And," are two conjunctions there.
* Sentences are IFBench's regex sentences (:func:`ifdistill.benchmarks.ifbench.text.split_into_sentences`).
* Counts may be floats (the data stores ``12.0``); they are compared as given.

Where the reference crashes, ifdistill decides, and says so: ``ratio:stop_words`` on a response
without any ``\\w+`` word and ``ratio:overlap`` on a response shorter than three characters divide
by zero there; both fail here (no words, no trigram: nothing can be within the ratio).
"""

from __future__ import annotations

import re
import string

from ifdistill.benchmarks.instruction_following.instruction_base import (
    Instruction,
    InvalidKwargsError,
    want_number,
    want_text,
)
from ifdistill.benchmarks.ifbench import text as T

PUNCT = string.punctuation
PUNCT_SPACE = PUNCT + " "
DELETE_PUNCT = str.maketrans("", "", PUNCT)
_DIGITS_RE = re.compile(r"\d+")
_JAPANESE_RE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")

CONJUNCTIONS = frozenset(("and", "but", "for", "nor", "or", "so", "yet"))
PERSON_NAMES = (
    "Emma Liam Sophia Jackson Olivia Noah Ava Lucas Isabella Mason Mia Ethan Charlotte Alexander "
    "Amelia Benjamin Harper Leo Zoe Daniel Chloe Samuel Lily Matthew Grace Owen Abigail Gabriel Ella "
    "Jacob Scarlett Nathan Victoria Elijah Layla Nicholas Audrey David Hannah Christopher Penelope "
    "Thomas Nora Andrew Aria Joseph Claire Ryan Stella Jonathan"
).split()
PRONOUNS = frozenset(
    "i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his "
    "himself she her hers herself it its itself they them their theirs themselves".split()
)
KEYWORD_COUNTS = (1, 2, 3, 5, 7)


class WordCountRange(Instruction):
    """Between ``min_words`` and ``max_words`` ``\\w+`` words, both inclusive."""

    instruction_id = "count:word_count_range"
    params = ("min_words", "max_words")

    def __init__(self, *, min_words, max_words):
        self.min_words = want_number("min_words", min_words)
        self.max_words = want_number("max_words", max_words)

    def check(self, text: str) -> bool:
        return self.min_words <= T.count_words(text) <= self.max_words


class UniqueWordCount(Instruction):
    """At least ``N`` distinct lower-cased whitespace words, punctuation stripped at their ends
    (a piece of punctuation only counts once, as the empty word)."""

    instruction_id = "count:unique_word_count"
    params = ("N",)

    def __init__(self, *, N):
        self.N = want_number("N", N)

    def check(self, text: str) -> bool:
        return len({w.strip(PUNCT_SPACE) for w in text.lower().split()}) >= self.N


class Conjunctions(Instruction):
    """At least ``small_n`` different coordinating conjunctions (distinct as written)."""

    instruction_id = "count:conjunctions"
    params = ("small_n",)

    def __init__(self, *, small_n):
        self.small_n = want_number("small_n", small_n)

    def check(self, text: str) -> bool:
        found = {w for w in text.split() if w.strip(PUNCT_SPACE).lower() in CONJUNCTIONS}
        return len(found) >= self.small_n


class PersonNames(Instruction):
    """At least ``N`` of the 50 listed names occur (as substrings, case as written)."""

    instruction_id = "count:person_names"
    params = ("N",)

    def __init__(self, *, N):
        self.N = want_number("N", N)

    def check(self, text: str) -> bool:
        return sum(1 for name in PERSON_NAMES if name in text) >= self.N


class Numbers(Instruction):
    """Exactly ``N`` digit runs once ASCII punctuation is deleted ("3.14" is one number)."""

    instruction_id = "count:numbers"
    params = ("N",)

    def __init__(self, *, N):
        self.N = want_number("N", N)

    def check(self, text: str) -> bool:
        return len(_DIGITS_RE.findall(text.translate(DELETE_PUNCT))) == self.N


class PunctuationCover(Instruction):
    """An interrobang (``?!``, ``!?`` or ``‽``) and, besides the first ``?!`` (else ``!?``)
    removed, each of ``. , ! ? ; :``."""

    instruction_id = "count:punctuation"

    def check(self, text: str) -> bool:
        if not ("!?" in text or "?!" in text or "\u203d" in text):
            return False
        rest = text.replace("?!", "", 1)
        if len(rest) == len(text):
            rest = text.replace("!?", "", 1)
        return all(mark in rest for mark in ".,!?;:")


class WordsJapanese(Instruction):
    """Every ``N``-th whitespace word (punctuation stripped, digits exempt) holds Japanese script."""

    instruction_id = "count:words_japanese"
    params = ("N",)

    def __init__(self, *, N):
        self.N = want_number("N", N)
        if self.N == 0:  # the reference divides by it
            raise InvalidKwargsError("N", "must not be 0")

    def check(self, text: str) -> bool:
        for i, word in enumerate(text.split()):
            word = word.strip(PUNCT_SPACE)
            if (i + 1) % self.N == 0 and word and not word.isdigit():
                if not _JAPANESE_RE.search(word):
                    return False
        return True


class Pronouns(Instruction):
    """At least ``N`` personal pronouns ("/" splits "she/her"; punctuation is deleted first)."""

    instruction_id = "count:pronouns"
    params = ("N",)

    def __init__(self, *, N):
        self.N = want_number("N", N)

    def check(self, text: str) -> bool:
        words = text.replace("/", " ").lower().translate(DELETE_PUNCT).split()
        return sum(1 for w in words if w in PRONOUNS) >= self.N


class KeywordsMultiple(Instruction):
    """``keyword1``..``keyword5`` occur exactly 1, 2, 3, 5 and 7 times (case-insensitive
    substrings, keywords stripped)."""

    instruction_id = "count:keywords_multiple"
    params = ("keyword1", "keyword2", "keyword3", "keyword4", "keyword5")

    def __init__(self, *, keyword1, keyword2, keyword3, keyword4, keyword5):
        given = (keyword1, keyword2, keyword3, keyword4, keyword5)
        self.keywords = tuple(
            want_text(f"keyword{i}", k, strip=True) for i, k in enumerate(given, start=1)
        )
        for i, k in enumerate(self.keywords, start=1):
            setattr(self, f"keyword{i}", k)
        self._lowered = tuple(k.lower() for k in self.keywords)

    def check(self, text: str) -> bool:
        lowered = text.lower()
        return all(lowered.count(k) == n for k, n in zip(self._lowered, KEYWORD_COUNTS))


class StopWords(Instruction):
    """Stopwords are at most ``percentage`` % of the ``\\w+`` words (no word at all fails)."""

    instruction_id = "ratio:stop_words"
    params = ("percentage",)

    def __init__(self, *, percentage):
        self.percentage = want_number("percentage", percentage)

    def check(self, text: str) -> bool:
        words, stopwords = T.count_words_and_stopwords(text)
        if words == 0:
            return False  # the reference divides by zero
        return (stopwords / words) * 100 <= self.percentage


def _endings(text: str) -> tuple[int, int, int]:
    """Sentences ending in ``.``, ``?`` and ``!``."""
    sentences = T.split_into_sentences(text)
    return (
        sum(1 for s in sentences if s.endswith(".")),
        sum(1 for s in sentences if s.endswith("?")),
        sum(1 for s in sentences if s.endswith("!")),
    )


class SentenceType(Instruction):
    """Twice as many sentences ending in ``.`` as ending in ``?`` (0 and 0 included)."""

    instruction_id = "ratio:sentence_type"

    def check(self, text: str) -> bool:
        declarative, interrogative, _ = _endings(text)
        return declarative == 2 * interrogative


class SentenceBalance(Instruction):
    """As many sentences ending in ``.`` as in ``?`` as in ``!``."""

    instruction_id = "ratio:sentence_balance"

    def check(self, text: str) -> bool:
        declarative, interrogative, exclamatory = _endings(text)
        return declarative == interrogative == exclamatory


def _char_trigrams(text: str) -> set[tuple[str, str, str]]:
    return set(zip(text, text[1:], text[2:]))


class Overlap(Instruction):
    """The share of the response's distinct character trigrams found in ``reference_text`` is
    ``percentage`` ± 2 points (a response without a trigram fails)."""

    instruction_id = "ratio:overlap"
    params = ("reference_text", "percentage")

    def __init__(self, *, reference_text, percentage):
        self.reference_text = want_text("reference_text", reference_text)
        self.percentage = want_number("percentage", percentage)
        self._reference = _char_trigrams(self.reference_text)

    def check(self, text: str) -> bool:
        trigrams = _char_trigrams(text)
        if not trigrams:
            return False  # the reference divides by zero
        overlap = len(trigrams & self._reference) / len(trigrams)
        return self.percentage - 2 <= overlap * 100 <= self.percentage + 2


class SentenceWords(Instruction):
    """Exactly three sentences, all of the same length in characters."""

    instruction_id = "ratio:sentence_words"

    def check(self, text: str) -> bool:
        sentences = T.split_into_sentences(text)
        return len(sentences) == 3 and len({len(s.strip()) for s in sentences}) == 1


COUNT_INSTRUCTIONS: tuple[type[Instruction], ...] = (
    WordCountRange, UniqueWordCount, Conjunctions, PersonNames, Numbers, PunctuationCover,
    WordsJapanese, Pronouns, KeywordsMultiple, StopWords, SentenceType, SentenceBalance, Overlap,
    SentenceWords,
)  # fmt: skip
