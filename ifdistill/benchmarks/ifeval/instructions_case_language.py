"""``language:response_language`` and ``change_case:*``: the instructions that need langdetect or
nltk's word tokenizer.

* Language detection is langdetect, **seeded** (``DetectorFactory.seed = 0``, see
  :mod:`ifdistill.benchmarks.instruction_following.text_analysis`). When langdetect cannot decide (``LangDetectException``,
  e.g. a response without letters) the instruction counts as **followed**, as in the reference.
* "All lowercase / all capitals, in English" means ``str.islower()`` / ``str.isupper()`` **and**
  langdetect says ``en``. A text without any cased letter fails ``islower``/``isupper`` and so fails
  the instruction before langdetect is asked.
* Capital words are ``nltk.word_tokenize`` tokens with ``str.isupper()``: "I", "USA" and "A1" count.
"""

from __future__ import annotations

from ifdistill.benchmarks.instruction_following import text_analysis
from ifdistill.benchmarks.instruction_following.instruction_base import (
    Instruction,
    InvalidKwargsError,
    compare,
    want_count,
    want_relation,
)

#: The language codes the benchmark can ask for (ISO 639-1, as langdetect names them). The
#: reference fails with a KeyError on any other code, so ifdistill rejects it as a bad kwarg.
LANGUAGE_CODES: dict[str, str] = {
    "en": "English", "es": "Spanish", "pt": "Portuguese", "ar": "Arabic", "hi": "Hindi",
    "fr": "French", "ru": "Russian", "de": "German", "ja": "Japanese", "it": "Italian",
    "bn": "Bengali", "uk": "Ukrainian", "th": "Thai", "ur": "Urdu", "ta": "Tamil",
    "te": "Telugu", "bg": "Bulgarian", "ko": "Korean", "pl": "Polish", "he": "Hebrew",
    "fa": "Persian", "vi": "Vietnamese", "ne": "Nepali", "sw": "Swahili", "kn": "Kannada",
    "mr": "Marathi", "gu": "Gujarati", "pa": "Punjabi", "ml": "Malayalam", "fi": "Finnish",
}  # fmt: skip


class ResponseLanguage(Instruction):
    """The whole response is in ``language`` according to langdetect (undecidable counts as yes)."""

    instruction_id = "language:response_language"
    params = ("language",)

    def __init__(self, *, language):
        if language not in LANGUAGE_CODES:
            raise InvalidKwargsError(
                "language", f"expected one of {sorted(LANGUAGE_CODES)}, got {language!r}"
            )
        self.language = language

    def check(self, text: str) -> bool:
        return text_analysis.language_matches(text, self.language)


class EnglishCapital(Instruction):
    """All cased letters are capitals (``isupper``) and the text is English."""

    instruction_id = "change_case:english_capital"

    def check(self, text: str) -> bool:
        if not text.isupper():
            return False
        return text_analysis.language_matches(text, "en")


class EnglishLowercase(Instruction):
    """All cased letters are lower case (``islower``) and the text is English."""

    instruction_id = "change_case:english_lowercase"

    def check(self, text: str) -> bool:
        if not text.islower():
            return False
        return text_analysis.language_matches(text, "en")


class CapitalWordFrequency(Instruction):
    """Words written in all capitals occur ``less than`` / ``at least`` ``capital_frequency`` times."""

    instruction_id = "change_case:capital_word_frequency"
    params = ("capital_frequency", "capital_relation")

    def __init__(self, *, capital_frequency, capital_relation):
        self.capital_frequency = want_count("capital_frequency", capital_frequency)
        self.capital_relation = want_relation("capital_relation", capital_relation)

    def check(self, text: str) -> bool:
        found = text_analysis.count_capital_words(text)
        return compare(found, self.capital_relation, self.capital_frequency)
