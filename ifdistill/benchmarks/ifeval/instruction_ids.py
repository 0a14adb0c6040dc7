"""IFEval's 25 instruction types (google's IFEval), keyed by their benchmark ids.

An explicit tuple rather than import-time self-registration, so one file shows every id and importing
it costs nothing: no nltk, no langdetect, no network. IFEval's registration
(:mod:`ifdistill.benchmarks.ifeval.benchmark`) holds this table; the shared scorer finds it there
(:func:`ifdistill.benchmarks.instruction_following.lookup.all_instructions`).
"""

from __future__ import annotations

from ifdistill.benchmarks.instruction_following.instruction_base import Instruction
from ifdistill.benchmarks.ifeval.instructions_case_language import (
    CapitalWordFrequency,
    EnglishCapital,
    EnglishLowercase,
    ResponseLanguage,
)
from ifdistill.benchmarks.ifeval.instructions_content import (
    EndPhrase,
    NoComma,
    Placeholders,
    Postscript,
    Quotation,
    RepeatPrompt,
    TwoResponses,
)
from ifdistill.benchmarks.ifeval.instructions_format import (
    BulletLists,
    ConstrainedResponse,
    HighlightedSections,
    JsonFormat,
    MultipleSections,
    Title,
)
from ifdistill.benchmarks.ifeval.instructions_keywords import (
    ForbiddenWords,
    KeywordExistence,
    KeywordFrequency,
    LetterFrequency,
)
from ifdistill.benchmarks.ifeval.instructions_length import (
    NthParagraphFirstWord,
    NumberOfParagraphs,
    NumberOfSentences,
    NumberOfWords,
)

_ALL: tuple[type[Instruction], ...] = (
    KeywordExistence,
    KeywordFrequency,
    ForbiddenWords,
    LetterFrequency,
    ResponseLanguage,
    NumberOfSentences,
    NumberOfParagraphs,
    NumberOfWords,
    NthParagraphFirstWord,
    Placeholders,
    Postscript,
    BulletLists,
    ConstrainedResponse,
    HighlightedSections,
    MultipleSections,
    JsonFormat,
    Title,
    TwoResponses,
    RepeatPrompt,
    EndPhrase,
    CapitalWordFrequency,
    EnglishCapital,
    EnglishLowercase,
    NoComma,
    Quotation,
)

#: Benchmark id (e.g. ``punctuation:no_comma``) -> checker class.
INSTRUCTION_REGISTRY: dict[str, type[Instruction]] = {cls.instruction_id: cls for cls in _ALL}

