"""M-IFEval's French instructions (``fr:``): 30 ids, 15 of them IFEval's checkers.

Sentences are Punkt's French ones (:func:`~.tools.french_sentences`); words and capital words are counted
as IFEval counts them (``\\w+`` tokens; ``nltk.word_tokenize`` with English Punkt). Relations: ``au moins``
is ``>=``, ``moins de`` ``<`` (as IFEval's). A title is ``##…##`` on one line; a quotation is wrapped in
``"…"``, ``'…'`` or ``«…»``.
"""

from __future__ import annotations

import re

from ifdistill.benchmarks.instruction_following import text_analysis
from ifdistill.benchmarks.instruction_following.instruction_base import Instruction, InvalidKwargsError
from ifdistill.benchmarks.mifeval import tools
from ifdistill.benchmarks.mifeval.common import Counted, IdTable, KeywordCount, LanguageOf, LetterCount, options_checker

_TITLE_RE = re.compile(r"##[^\n]+##")
_INFORMAL_RE = re.compile(r"\btu\b|\bte\b|\bt'\b|\btoi\b|\bton\b|\bta\b|\btes\b", re.IGNORECASE)
_DIGIT_RE = re.compile(r"\d")
_WORD_RE = re.compile(r"\b\w+\b")
_ACCENTED = frozenset("àáâãäåçèéêëìíîïñòóôõöùúûüýÿÀÁÂÃÄÅÇÈÉÊËÌÍÎÏÑÒÓÔÕÖÙÚÛÜÝ")
_QUOTES = (('"', '"'), ("'", "'"), ("«", "»"))


class CapitalWordFrequency(Counted):
    """Words in capitals: ``nltk.word_tokenize`` tokens with ``isupper`` (IFEval's count)."""

    instruction_id = "fr:change_case:capital_word_frequency"
    language = "fr"
    params = ("capital_frequency", "capital_relation")

    def measure(self, text: str) -> int:
        return text_analysis.count_capital_words(text)


class FrenchCapital(Instruction):
    """``isupper`` and langdetect calls the lowered text French (undecidable counts as yes)."""

    instruction_id = "fr:change_case:french_capital"

    def check(self, text: str) -> bool:
        return text.isupper() and text_analysis.language_matches(text.lower(), "fr")


class FrenchLowercase(Instruction):
    """``islower`` and langdetect calls the text French (undecidable counts as yes)."""

    instruction_id = "fr:change_case:french_lowercase"

    def check(self, text: str) -> bool:
        return text.islower() and text_analysis.language_matches(text, "fr")


class InformalAddress(Instruction):
    """*tu*, *te*, *t'* (ASCII apostrophe before a letter), *toi*, *ton*, *ta* or *tes* as a word, any case."""

    instruction_id = "fr:detectable_content:informal_address"

    def check(self, text: str) -> bool:
        return _INFORMAL_RE.search(text) is not None


class NoDigits(Instruction):
    """No decimal digit of any script (``\\d``); spelled-out and Roman numbers are fine."""

    instruction_id = "fr:detectable_content:no_digits"

    def check(self, text: str) -> bool:
        return _DIGIT_RE.search(text) is None


class Title(Instruction):
    """A title between double hashes, ``##titre##``, on one line and not blank (``<<…>>`` does not count)."""

    instruction_id = "fr:detectable_format:title"

    def check(self, text: str) -> bool:
        return any(m.strip("#").strip() for m in _TITLE_RE.findall(text))


class KeywordFrequency(KeywordCount):
    instruction_id = "fr:keywords:frequency"
    language = "fr"


class LetterFrequency(LetterCount):
    instruction_id = "fr:keywords:letter_frequency"
    language = "fr"


class NumberOfSentences(Counted):
    """Punkt's French sentences of the raw response."""

    instruction_id = "fr:length_constraints:number_sentences"
    language = "fr"
    params = ("num_sentences", "relation")

    def measure(self, text: str) -> int:
        return len(tools.french_sentences(text))


class NumberOfWords(Counted):
    """``\\w+`` tokens (IFEval's count: ``l'école`` is two)."""

    instruction_id = "fr:length_constraints:number_words"
    language = "fr"
    params = ("num_words", "relation")

    def measure(self, text: str) -> int:
        return text_analysis.count_words(text)


class Accents(Instruction):
    """Every word whose unaccented form is a key of ``word_to_accentuate`` is written as its value (lowered
    words; ``a`` -> ``à`` makes every standalone *a* fail); passes when none of the words occurs."""

    instruction_id = "fr:special_character:accents"
    params = ("word_to_accentuate",)

    def __init__(self, *, word_to_accentuate):
        if not isinstance(word_to_accentuate, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in word_to_accentuate.items()):
            raise InvalidKwargsError("word_to_accentuate", f"expected an object of strings, got {word_to_accentuate!r}")
        self.word_to_accentuate = dict(word_to_accentuate)

    def check(self, text: str) -> bool:
        for word in _WORD_RE.findall(text.lower()):
            wanted = self.word_to_accentuate.get(tools.without_accents(word))
            if wanted is not None and word != wanted:
                return False
        return True


class EthelOrCedilla(Instruction):
    """``forbidden_char`` (``ç`` or ``œ``) does not occur, in either case."""

    instruction_id = "fr:special_character:ethel_or_cedilla"
    params = ("forbidden_char",)

    def __init__(self, *, forbidden_char):
        if not isinstance(forbidden_char, str) or len(forbidden_char) != 1:
            raise InvalidKwargsError("forbidden_char", f"expected a single character, got {forbidden_char!r}")
        self.forbidden_char = forbidden_char
        self._pattern = re.compile(re.escape(forbidden_char), re.IGNORECASE)

    def check(self, text: str) -> bool:
        return self._pattern.search(text) is None


class NoAccents(Instruction):
    """None of the accented Latin letters ``à á â … ÿ`` (``œ``, ``æ``, ``Ÿ`` are allowed)."""

    instruction_id = "fr:special_character:no_accents"

    def check(self, text: str) -> bool:
        return _ACCENTED.isdisjoint(text)


class Quotation(Instruction):
    """The stripped response is wrapped in ``"…"``, ``'…'`` or ``«…»`` (curly quotes are not accepted)."""

    instruction_id = "fr:startend:quotation"

    def check(self, text: str) -> bool:
        body = text.strip()
        return len(body) > 1 and (body[0], body[-1]) in _QUOTES


ConstrainedResponse = options_checker("fr:detectable_format:constrained_response", ("Oui.", "Non.", "Peut-être."))


class ResponseLanguage(LanguageOf):
    instruction_id = "fr:language:response_language"

#: ``fr:`` id -> checker.
FRENCH = IdTable("fr", (
    CapitalWordFrequency, FrenchCapital, FrenchLowercase, InformalAddress, NoDigits, ConstrainedResponse, Title,
    KeywordFrequency, LetterFrequency, NumberOfSentences, NumberOfWords, Accents, EthelOrCedilla, NoAccents,
    Quotation, ResponseLanguage,
), same=(
    "combination:repeat_prompt", "combination:two_responses", "detectable_content:number_placeholders",
    "detectable_content:postscript", "detectable_format:json_format", "detectable_format:multiple_sections",
    "detectable_format:number_bullet_lists", "detectable_format:number_highlighted_sections",
    "keywords:existence", "keywords:forbidden_words",
    "length_constraints:nth_paragraph_first_word", "length_constraints:number_paragraphs",
    "punctuation:no_comma", "startend:end_checker",
))
