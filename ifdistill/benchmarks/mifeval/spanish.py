"""M-IFEval's Spanish instructions (``es:``): 30 ids, 13 of them IFEval's checkers.

Words are spaCy's Spanish tokens that are not punctuation (:mod:`.tools`): the raw response for capital
words, ``ñ``, ``ü`` and accented words; for ``number_words`` the response with its line-start list markers
removed and its lines joined by a space (so two adjacent spaces make a whitespace token, which counts).
Relations: ``al menos`` is ``>=``, ``como máximo`` ``<=`` (inclusive, unlike IFEval's ``less than``).
``number_placeholders``, ``number_highlighted_sections`` and ``multiple_sections`` carry a ``relation``
that is accepted and ignored (the test is always "at least"). Bullets are ``*`` lines only.
"""

from __future__ import annotations

import re
import string

from ifdistill.benchmarks.instruction_following import text_analysis
from ifdistill.benchmarks.instruction_following.instruction_base import Instruction, want_count, want_regex, want_text
from ifdistill.benchmarks.mifeval import tools
from ifdistill.benchmarks.mifeval.common import (
    Counted,
    FirstWordBase,
    IdTable,
    KeywordCount,
    LanguageOf,
    LetterCount,
    options_checker,
)

_STAR_BULLET_RE = re.compile(r"^\s*\*[^\*].*$", re.MULTILINE)
_QUESTION_RE = re.compile(r"¿[^?]*\?")
_EXCLAMATION_RE = re.compile(r"¡[^!]*!")
_ACUTE = frozenset("áéíóú")
_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)


class CapitalWordFrequency(Counted):
    """Words (spaCy tokens of the raw response, punctuation excluded) in capitals (``isupper``)."""

    instruction_id = "es:change_case:capital_word_frequency"
    language = "es"
    params = ("capital_frequency", "capital_relation")

    def measure(self, text: str) -> int:
        return sum(1 for w in tools.spanish_words(text) if w.isupper())


class SpanishCapital(Instruction):
    """Every letter is a capital once accents are removed (NFKD; ``ª``, ``º``, ``ß`` and uncased letters
    fail) and langdetect calls the lowered text Spanish (undecidable counts as yes)."""

    instruction_id = "es:change_case:spanish_capital"

    def check(self, text: str) -> bool:
        if not all(c.isupper() for c in tools.without_accents(text) if c.isalpha()):
            return False
        return text_analysis.language_matches(text.lower(), "es")


class SpanishLowercase(Instruction):
    """All cased letters are lower case (``islower``) and langdetect calls the text Spanish."""

    instruction_id = "es:change_case:spanish_lowercase"

    def check(self, text: str) -> bool:
        return text.islower() and text_analysis.language_matches(text, "es")


class Postscript(Instruction):
    """A postscript marker anywhere in the lowered response: ``P.D.`` as ``p.`` ``d.`` with optional single
    spaces, any other marker (``Nota``: also inside ``notable``) as its lowered, unescaped pattern."""

    instruction_id = "es:detectable_content:postscript"
    params = ("postscript_marker",)

    def __init__(self, *, postscript_marker):
        self.postscript_marker = want_text("postscript_marker", postscript_marker, strip=True)
        marker = r"p\.\s?d\." if self.postscript_marker == "P.D." else self.postscript_marker.lower()
        self._pattern = want_regex("postscript_marker", r"\s*" + marker + r".*$", re.MULTILINE)

    def check(self, text: str) -> bool:
        return self._pattern.search(text.lower()) is not None


class BulletLists(Instruction):
    """Exactly ``num_bullets`` ``*`` bullet lines (``-`` lines do not count)."""

    instruction_id = "es:detectable_format:number_bullet_lists"
    params = ("num_bullets",)

    def __init__(self, *, num_bullets):
        self.num_bullets = want_count("num_bullets", num_bullets)

    def check(self, text: str) -> bool:
        return len(_STAR_BULLET_RE.findall(text)) == self.num_bullets


class KeywordFrequency(KeywordCount):
    instruction_id = "es:keywords:frequency"
    language = "es"


class LetterFrequency(LetterCount):
    instruction_id = "es:keywords:letter_frequency"
    language = "es"


class NthParagraphFirstWord(FirstWordBase):
    """The paragraph's first words, each without ASCII punctuation and lowered, are ``first_word``'s words
    (a phrase such as ``En mi opinión``): ``**Para**`` matches ``para``, ``¿Para`` does not."""

    instruction_id = "es:length_constraints:nth_paragraph_first_word"

    def starts_with(self, paragraph: str) -> bool:
        wanted = self.first_word.lower().split()
        words = [w.translate(_ASCII_PUNCTUATION).lower() for w in paragraph.split()[: len(wanted)]]
        return words == wanted


class NumberOfSentences(Counted):
    """Sentences of the response without its list markers (:func:`~.tools.count_spanish_sentences`)."""

    instruction_id = "es:length_constraints:number_sentences"
    language = "es"
    params = ("num_sentences", "relation")

    def measure(self, text: str) -> int:
        return tools.count_spanish_sentences(text)


class NumberOfWords(Counted):
    """Words of the response without its list markers, lines joined (:func:`~.tools.count_spanish_words`)."""

    instruction_id = "es:length_constraints:number_words"
    language = "es"
    params = ("num_words", "relation")

    def measure(self, text: str) -> int:
        return tools.count_spanish_words(text)


def _paired(instruction_id: str, pattern: re.Pattern[str], opener: str, closer: str) -> type[Instruction]:
    def check(self, text: str) -> bool:
        return any(m[1:-1].strip() for m in pattern.findall(text))

    doc = f"Some non-blank text between an opening {opener} and the next {closer}."
    return type(instruction_id.rsplit(":", 1)[1].title().replace("_", ""), (Instruction,),
                {"instruction_id": instruction_id, "check": check, "__doc__": doc, "__module__": __name__})


QuestionMarks = _paired("es:punctuation:question_marks", _QUESTION_RE, "¿", "?")
ExclamationMarks = _paired("es:punctuation:exclamation_marks", _EXCLAMATION_RE, "¡", "!")


class _LetterWords(Instruction):
    """Exactly ``let_frequency`` words (once each) that hold the letter, in either case."""

    params = ("let_frequency",)
    letter = ""

    def __init__(self, *, let_frequency):
        self.let_frequency = want_count("let_frequency", let_frequency)

    def check(self, text: str) -> bool:
        return sum(1 for w in tools.spanish_words(text) if self.letter in w.lower()) == self.let_frequency


class Enie(_LetterWords):
    __doc__ = _LetterWords.__doc__.replace("the letter", "``ñ``")
    instruction_id = "es:special_character:enie"
    letter = "ñ"


class Dieresis(_LetterWords):
    __doc__ = _LetterWords.__doc__.replace("the letter", "``ü``")
    instruction_id = "es:special_character:dieresis"
    letter = "ü"


class Tildes(Counted):
    """Words holding an acute accent (``á é í ó ú``, either case; ``ñ``, ``ü``, grave accents do not count)."""

    instruction_id = "es:special_character:tildes"
    language = "es"
    params = ("num_words", "relation")

    def measure(self, text: str) -> int:
        return sum(1 for w in tools.spanish_words(text) if not _ACUTE.isdisjoint(w.lower()))


class EndPhrase(Instruction):
    """The stripped, unquoted, lowered response, less one final ``.``, ends with ``end_phrase`` (lowered):
    ``Un saludo.`` satisfies ``Un saludo``."""

    instruction_id = "es:startend:end_checker"
    params = ("end_phrase",)

    def __init__(self, *, end_phrase):
        self.end_phrase = want_text("end_phrase", end_phrase, strip=True)

    def check(self, text: str) -> bool:
        body = text.strip().strip('"').lower()
        return body.removesuffix(".").endswith(self.end_phrase.lower())


ConstrainedResponse = options_checker("es:detectable_format:constrained_response", ("Sí.", "No.", "Quizás."))


class ResponseLanguage(LanguageOf):
    instruction_id = "es:language:response_language"

#: ``es:`` id -> checker.
SPANISH = IdTable("es", (
    CapitalWordFrequency, SpanishCapital, SpanishLowercase, Postscript, ConstrainedResponse, BulletLists,
    KeywordFrequency, LetterFrequency, NthParagraphFirstWord, NumberOfSentences, NumberOfWords, QuestionMarks,
    ExclamationMarks, Enie, Dieresis, Tildes, EndPhrase, ResponseLanguage,
), same=(
    "combination:repeat_prompt", "combination:two_responses", "detectable_content:number_placeholders",
    "detectable_format:json_format", "detectable_format:multiple_sections",
    "detectable_format:number_highlighted_sections", "detectable_format:title", "keywords:existence",
    "keywords:forbidden_words", "length_constraints:number_paragraphs",
    "punctuation:no_comma", "startend:quotation",
), ignoring={iid: ("relation",) for iid in (
    "detectable_content:number_placeholders", "detectable_format:multiple_sections",
    "detectable_format:number_highlighted_sections")})
