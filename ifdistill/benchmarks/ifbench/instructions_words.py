"""IFBench's ``words:*`` and ``sentence:*`` constraints.

Each class reproduces the reference checker's definition of "word" (whitespace pieces, with ASCII
punctuation deleted or stripped at the ends, or ``nltk.word_tokenize`` tokens) and of "sentence"
(IFBench's regex splitter, :func:`ifdistill.benchmarks.ifbench.text.split_into_sentences`).

Where the reference crashes, ifdistill decides: ``words:last_first`` on a sentence with no word
left once punctuation is stripped, and ``sentence:increment`` on a text without a sentence, raise
``IndexError`` there; both fail here (no word can be compared).

``words:start_verb`` follows the reference's NLTK tagger when it is installed locally, else a
lexicon rule; see :mod:`ifdistill.benchmarks.ifbench.text` and :mod:`ifdistill.benchmarks.ifbench.verbs`.
"""

from __future__ import annotations

import string
from collections import Counter

from ifdistill.benchmarks.instruction_following.instruction_base import Instruction, want_count, want_number, want_text
from ifdistill.benchmarks.ifbench import text as T
from ifdistill.benchmarks.ifbench.instructions_count import DELETE_PUNCT, PUNCT_SPACE

ALPHABET = string.ascii_lowercase
VOWELS = frozenset("aeiou")
CONSONANTS = frozenset("bcdfghjklmnpqrstvwxyz")
PRIMES = frozenset((2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97))


class AlphabetLoop(Instruction):
    """Each word starts with the letter after the previous word's first letter (z wraps to a);
    the first word must start with a-z. Punctuation is deleted first."""

    instruction_id = "words:alphabet"

    def check(self, text: str) -> bool:
        words = text.translate(DELETE_PUNCT).strip(PUNCT_SPACE).split()
        if not words:
            return False
        letter = words[0][0].lower()
        if letter not in ALPHABET:  # a substring test, as in the reference
            return False
        for word in words[1:]:
            word = word.strip(PUNCT_SPACE).lower()
            if not word:
                continue
            letter = ALPHABET[(ALPHABET.index(letter) + 1) % 26]
            if word[0] != letter:
                return False
        return True


class SingleVowelParagraph(Instruction):
    """One line (after stripping) using at most three of the vowels a, e, i, o, u."""

    instruction_id = "words:vowel"

    def check(self, text: str) -> bool:
        lines = text.strip().split("\n")
        return len(lines) == 1 and len(VOWELS.intersection(lines[0].lower())) <= 3


class ConsonantCluster(Instruction):
    """Every whitespace word has two adjacent consonants (a-z, y included)."""

    instruction_id = "words:consonants"

    def check(self, text: str) -> bool:
        for word in text.lower().strip().split():
            if not any(a in CONSONANTS and b in CONSONANTS for a, b in zip(word, word[1:])):
                return False
        return True


class Palindromes(Instruction):
    """At least 10 words (punctuation deleted, lower-cased) that are palindromes of length >= 5."""

    instruction_id = "words:palindrome"

    def check(self, text: str) -> bool:
        words = text.translate(DELETE_PUNCT).lower().split()
        return sum(1 for w in words if len(w) >= 5 and w == w[::-1]) >= 10


class PrimeLengths(Instruction):
    """Every word (punctuation deleted) has a prime length below 100."""

    instruction_id = "words:prime_lengths"

    def check(self, text: str) -> bool:
        return all(len(w) in PRIMES for w in text.translate(DELETE_PUNCT).split())


class StartVerb(Instruction):
    """The first ``nltk.word_tokenize`` token is a verb (tag ``VB*``)."""

    instruction_id = "words:start_verb"

    def check(self, text: str) -> bool:
        return T.starts_with_verb(text)


class LimitedRepeats(Instruction):
    """No word (lower-cased, punctuation deleted) occurs more than ``small_n`` times."""

    instruction_id = "words:repeats"
    params = ("small_n",)

    def __init__(self, *, small_n):
        self.small_n = want_number("small_n", small_n)

    def check(self, text: str) -> bool:
        counts = Counter(text.lower().translate(DELETE_PUNCT).split())
        return all(n <= self.small_n for n in counts.values())


class OddEvenSyllables(Instruction):
    """Consecutive words alternate between odd and even syllable counts (syllapy)."""

    instruction_id = "words:odd_even_syllables"

    def check(self, text: str) -> bool:
        parities = [T.syllables(w) % 2 for w in text.translate(DELETE_PUNCT).lower().split()]
        return all(a != b for a, b in zip(parities, parities[1:]))


class LastWordFirstNext(Instruction):
    """Each sentence's last word (case-insensitive) is the next sentence's first word."""

    instruction_id = "words:last_first"

    def check(self, text: str) -> bool:
        sentences = T.split_into_sentences(text)
        for current, following in zip(sentences, sentences[1:]):
            last = current.rstrip(PUNCT_SPACE).split()
            first = following.lstrip(PUNCT_SPACE).split()
            if not last or not first:
                return False  # the reference raises IndexError
            if last[-1].lower() != first[0].lower():
                return False
        return True


class ParagraphLastFirst(Instruction):
    """Every non-blank line starts and ends with the same word (lower-cased, punctuation stripped
    at the line's ends); a line of punctuation only fails."""

    instruction_id = "words:paragraph_last_first"

    def check(self, text: str) -> bool:
        for line in text.split("\n"):
            line = line.strip().lower()
            if not line:
                continue
            words = line.strip(PUNCT_SPACE).split()
            if not words or words[0] != words[-1]:
                return False
        return True


class NoConsecutiveFirstLetter(Instruction):
    """No two consecutive words (lower-cased, punctuation deleted) share their first character."""

    instruction_id = "words:no_consecutive"

    def check(self, text: str) -> bool:
        words = text.lower().translate(DELETE_PUNCT).split()
        return all(a[0] != b[0] for a, b in zip(words, words[1:]))


class KeywordSpecificPosition(Instruction):
    """``keyword`` is token ``m`` (``nltk.word_tokenize``) of sentence ``n`` (both 1-based)."""

    instruction_id = "words:keywords_specific_position"
    params = ("keyword", "n", "m")

    def __init__(self, *, keyword, n, m):
        self.keyword = want_text("keyword", keyword, strip=True)
        # 0 makes the reference draw a random position, so positions start at 1
        self.n = want_count("n", n, minimum=1)
        self.m = want_count("m", m, minimum=1)

    def check(self, text: str) -> bool:
        sentences = T.split_into_sentences(text)
        if len(sentences) < self.n:
            return False
        words = T.word_tokens(sentences[self.n - 1])
        return len(words) >= self.m and words[self.m - 1] == self.keyword


class WordsPosition(Instruction):
    """The second and the second-to-last ``nltk.word_tokenize`` tokens are both ``keyword``."""

    instruction_id = "words:words_position"
    params = ("keyword",)

    def __init__(self, *, keyword):
        self.keyword = want_text("keyword", keyword, strip=True)

    def check(self, text: str) -> bool:
        head, tail = T.edge_word_tokens(text, 2)
        return len(head) == 2 and head[1] == tail[0] == self.keyword


class AlliterationIncrement(Instruction):
    """Each sentence has a longer run of words sharing their first character than the previous.

    A run of k alliterating words scores k; runs of one sentence add up. The first sentence only
    needs a score above -1.
    """

    instruction_id = "sentence:alliteration_increment"

    def check(self, text: str) -> bool:
        previous = -1
        for sentence in T.split_into_sentences(text):
            words = [w.lstrip(PUNCT_SPACE) for w in sentence.lower().split()]
            words = [w for w in words if w]
            score, in_run = 0, False
            for a, b in zip(words, words[1:]):
                if a[0] == b[0]:
                    score += 1 if in_run else 2
                    in_run = True
                else:
                    in_run = False
            if score <= previous:
                return False
            previous = score
        return True


class SentenceKeyword(Instruction):
    """Sentence ``N`` (1-based) contains ``word`` (case-insensitive substring)."""

    instruction_id = "sentence:keyword"
    params = ("word", "N")

    def __init__(self, *, word, N):
        self.word = want_text("word", word)
        self.N = want_number("N", N)
        self._needle = self.word.lower()

    def check(self, text: str) -> bool:
        sentences = T.split_into_sentences(text)
        if len(sentences) < self.N or not sentences:
            return False
        return self._needle in sentences[int(self.N - 1)].lower()


def _word_count(sentence: str) -> int:
    return len(sentence.translate(DELETE_PUNCT).strip().split())


class IncrementingWordCount(Instruction):
    """Each sentence has exactly ``small_n`` more words (punctuation deleted) than the previous."""

    instruction_id = "sentence:increment"
    params = ("small_n",)

    def __init__(self, *, small_n):
        self.small_n = want_number("small_n", small_n)

    def check(self, text: str) -> bool:
        sentences = T.split_into_sentences(text)
        if not sentences:
            return False  # the reference raises IndexError
        counts = [_word_count(s) for s in sentences]
        return all(b == a + self.small_n for a, b in zip(counts, counts[1:]))


WORDS_INSTRUCTIONS: tuple[type[Instruction], ...] = (
    AlphabetLoop, SingleVowelParagraph, ConsonantCluster, Palindromes, PrimeLengths, StartVerb,
    LimitedRepeats, OddEvenSyllables, LastWordFirstNext, ParagraphLastFirst,
    NoConsecutiveFirstLetter, KeywordSpecificPosition, WordsPosition, AlliterationIncrement,
    SentenceKeyword, IncrementingWordCount,
)  # fmt: skip
