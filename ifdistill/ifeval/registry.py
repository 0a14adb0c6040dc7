"""The 25 instruction types of google's IFEval, keyed by their benchmark ids, and the lookup of
every id ifdistill scores (these and IFBench's 58).

The registry is an explicit list rather than import-time self-registration so that one file shows
every supported id, and so that importing it costs nothing: no nltk, no langdetect, no network.
``build_instruction`` caches built checkers (they are immutable), so scoring many rows with the same
prompts validates kwargs and compiles regexes once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ifdistill.checking.instruction_base import Instruction, InstructionError, InvalidKwargsError
from ifdistill.ifeval.instructions_case_language import (
    CapitalWordFrequency,
    EnglishCapital,
    EnglishLowercase,
    ResponseLanguage,
)
from ifdistill.ifeval.instructions_content import (
    EndPhrase,
    NoComma,
    Placeholders,
    Postscript,
    Quotation,
    RepeatPrompt,
    TwoResponses,
)
from ifdistill.ifeval.instructions_format import (
    BulletLists,
    ConstrainedResponse,
    HighlightedSections,
    JsonFormat,
    MultipleSections,
    Title,
)
from ifdistill.ifeval.instructions_keywords import (
    ForbiddenWords,
    KeywordExistence,
    KeywordFrequency,
    LetterFrequency,
)
from ifdistill.ifeval.instructions_length import (
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


@functools.cache
def all_instructions() -> dict[str, type[Instruction]]:
    """Every id ifdistill scores: IFEval's 25 and IFBench's 58 (:mod:`ifdistill.ifbench`).

    Built at first use, because the IFBench checkers import this package's base class.
    """
    from ifdistill.ifbench.registry import IFBENCH_REGISTRY  # noqa: PLC0415

    shared = set(INSTRUCTION_REGISTRY) & set(IFBENCH_REGISTRY)
    if shared:  # pragma: no cover - a guard for future ids
        raise RuntimeError(f"instruction ids in both IFEval and IFBench: {sorted(shared)}")
    return {**INSTRUCTION_REGISTRY, **IFBENCH_REGISTRY}


@functools.lru_cache(maxsize=4096)
def _build_cached(instruction_id: str, frozen_kwargs: tuple) -> Instruction:
    return all_instructions()[instruction_id].from_kwargs(_thaw(frozen_kwargs))


def _freeze(value: Any) -> Any:
    """A hashable, type-preserving key for JSON-like kwargs (``1`` and ``True`` stay apart)."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool:  # the common case, no ABC check
        return (kind.__name__, value)
    if isinstance(value, Mapping):
        return ("d", tuple(sorted(((str(k), _freeze(v)) for k, v in value.items()))))
    if isinstance(value, (list, tuple)):
        return ("l", tuple(_freeze(v) for v in value))
    if value is None or isinstance(value, (str, int, float, bool)):
        return (type(value).__name__, value)
    raise TypeError(f"unsupported kwarg value {value!r}")


_NO_KWARGS = ("d", ())


def _thaw(frozen: Any) -> Any:
    tag, payload = frozen
    if tag == "d":
        return {k: _thaw(v) for k, v in payload}
    if tag == "l":
        return [_thaw(v) for v in payload]
    return payload


def build_instruction(
    instruction_id: Any, kwargs: Mapping[str, Any] | None, index: int = 0
) -> Instruction:
    """The checker for one instruction of a row; ``index`` is its position, used in error fields.

    Raises :class:`InstructionError` whose ``field`` is ``instruction_id_list[index]`` for an
    unknown id, or ``kwargs[index]`` / ``kwargs[index].<name>`` for kwargs that do not fit.
    """
    if not isinstance(instruction_id, str) or instruction_id not in all_instructions():
        raise InstructionError(
            f"instruction_id_list[{index}]", f"unknown instruction id {instruction_id!r}"
        )
    if kwargs is None:
        kwargs = {}
    if type(kwargs) is not dict and not isinstance(kwargs, Mapping):
        raise InstructionError(
            f"kwargs[{index}]", f"expected an object, got {type(kwargs).__name__}"
        )
    try:  # None values are dropped by from_kwargs anyway; IFBench rows carry 42 such keys
        given = {k: v for k, v in kwargs.items() if v is not None}
        key = _freeze(given) if given else _NO_KWARGS
    except TypeError as exc:
        raise InstructionError(f"kwargs[{index}]", str(exc)) from None
    try:
        return _build_cached(instruction_id, key)
    except InvalidKwargsError as exc:
        field = f"kwargs[{index}].{exc.param}" if exc.param else f"kwargs[{index}]"
        raise InstructionError(field, f"{exc.reason} ({instruction_id})") from None
