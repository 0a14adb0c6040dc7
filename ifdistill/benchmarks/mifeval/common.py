"""What M-IFEval's three languages share: relation words, counted instructions, IFEval's checkers reused.

* **Relations** are written in the prompt's language and are not equally inclusive (``RELATIONS``):
  Spanish ``como máximo`` is ``<=``, French ``moins de`` and Japanese ``未満`` are ``<`` as IFEval's
  ``less than``; the "at least" words are ``>=``. Any other word is refused as a bad kwarg.
* **Counted instructions** (:class:`Counted`) compare one measurement of the text with a kwarg through
  the language's relation; a subclass states the kwargs' names and the measurement.
* **IFEval's checkers** decide where the specification says "same as IFEval": :class:`IdTable` takes
  them from IFEval's registration (through the benchmark registry, which this folder may ask but not
  import from), renamed to the language's id, and adds the language's own checkers.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Iterator, Mapping
from typing import Any, Callable, ClassVar, Optional

from ifdistill.benchmarks.instruction_following import text_analysis
from ifdistill.benchmarks.instruction_following.instruction_base import (
    Instruction,
    InvalidKwargsError,
    want_count,
    want_regex,
    want_text,
)

#: Per language: relation word -> the comparison ``(count, threshold) -> bool``.
RELATIONS: dict[str, dict[str, Callable[[Any, Any], bool]]] = {
    "es": {"al menos": operator.ge, "como máximo": operator.le},
    "fr": {"au moins": operator.ge, "moins de": operator.lt},
    "ja": {"以上": operator.ge, "未満": operator.lt},
}

#: The benchmark whose checkers M-IFEval reuses where its specification says "same as IFEval".
ENGLISH = "ifeval"
_LANGUAGE_CODE_RE = re.compile(r"[a-z]{2,3}(-[a-z]{2})?")


def want_relation(language: str, name: str, value: Any) -> Callable[[Any, Any], bool]:
    """The comparison a relation word of ``language`` stands for; ``InvalidKwargsError`` for another word."""
    table = RELATIONS[language]
    if value not in table:
        raise InvalidKwargsError(name, f"expected one of {list(table)}, got {value!r}")
    return table[value]


class Counted(Instruction):
    """A measurement of the text compared with a threshold kwarg through the language's relation word.

    Subclasses set ``language``, ``params`` (the threshold's name first, the relation's second, then any
    other kwargs, which :meth:`setup` validates) and implement :meth:`measure`."""

    language: ClassVar[str] = ""

    def __init__(self, **kwargs: Any):
        threshold, relation, *others = self.params
        self.threshold = want_count(threshold, kwargs[threshold])
        self._holds = want_relation(self.language, relation, kwargs[relation])
        for name in self.params:  # under their own names too (repr)
            setattr(self, name, kwargs[name])
        self.setup(**{name: kwargs[name] for name in others})

    def setup(self, **others: Any) -> None:
        """Validate the other kwargs (stored already under their names)."""

    def measure(self, text: str) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def check(self, text: str) -> bool:
        return self._holds(self.measure(text), self.threshold)


class KeywordCount(Counted):
    """IFEval's keyword frequency: non-overlapping case-insensitive matches of the stripped keyword used as an
    unescaped regular expression (substrings count: ``éxito`` inside ``éxitos``)."""

    params = ("frequency", "relation", "keyword")

    def setup(self, *, keyword: Any) -> None:
        self.keyword = want_text("keyword", keyword, strip=True)
        self._pattern = want_regex("keyword", self.keyword, re.IGNORECASE)

    def measure(self, text: str) -> int:
        return sum(1 for _ in self._pattern.finditer(text))


class LetterCount(Counted):
    """IFEval's letter frequency: occurrences of the lowered letter in the lowered text (code points
    exactly: ``a`` does not count ``á``)."""

    params = ("let_frequency", "let_relation", "letter")

    def setup(self, *, letter: Any) -> None:
        if not isinstance(letter, str) or len(letter) != 1:
            raise InvalidKwargsError("letter", f"expected a single character, got {letter!r}")
        self._needle = letter.lower()

    def measure(self, text: str) -> int:
        return text.lower().count(self._needle)


class LanguageOf(Instruction):
    """The whole response is in ``language`` according to langdetect, seeded (undecidable counts as yes).
    Any langdetect code is accepted: IFEval's list lacks ``zh``, which a French prompt asks for (langdetect
    answers ``zh-cn`` or ``zh-tw``, so only an undecidable text passes it, as in the reference)."""

    params = ("language",)

    def __init__(self, *, language):
        if not isinstance(language, str) or not _LANGUAGE_CODE_RE.fullmatch(language):
            raise InvalidKwargsError("language", f"expected a language code such as 'fi', got {language!r}")
        self.language = language

    def check(self, text: str) -> bool:
        return text_analysis.language_matches(text, self.language)


def nth_paragraph(text: str, num_paragraphs: int, nth: int) -> Optional[str]:
    """IFEval's paragraphs (``"\\n\\n"`` pieces): the stripped ``nth`` piece (1-based, blank pieces keep their
    place) when exactly ``num_paragraphs`` pieces are non-blank and it is not blank, else None."""
    pieces = text.split("\n\n")
    if sum(1 for p in pieces if p.strip()) != num_paragraphs or nth > num_paragraphs:
        return None
    return pieces[nth - 1].strip() or None


class FirstWordBase(Instruction):
    """``length_constraints:nth_paragraph_first_word`` of a language: IFEval's paragraphs, the language's
    first-word rule (:meth:`starts_with`)."""

    params = ("num_paragraphs", "nth_paragraph", "first_word")

    def __init__(self, *, num_paragraphs, nth_paragraph, first_word):
        self.num_paragraphs = want_count("num_paragraphs", num_paragraphs, minimum=1)
        self.nth_paragraph = want_count("nth_paragraph", nth_paragraph, minimum=1)
        if self.nth_paragraph > self.num_paragraphs:
            raise InvalidKwargsError("nth_paragraph", f"must be <= num_paragraphs ({self.num_paragraphs})")
        self.first_word = want_text("first_word", first_word)

    def starts_with(self, paragraph: str) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def check(self, text: str) -> bool:
        paragraph = nth_paragraph(text, self.num_paragraphs, self.nth_paragraph)
        return paragraph is not None and self.starts_with(paragraph)


def options_checker(instruction_id: str, options: tuple[str, ...]) -> type[Instruction]:
    """``detectable_format:constrained_response`` with the language's answers (a case-sensitive substring
    of the stripped response)."""

    def check(self, text: str) -> bool:
        body = text.strip()
        return any(option in body for option in options)

    doc = f"The response contains one of {', '.join(options)} (case as written)."
    return type("ConstrainedResponse", (Instruction,), {"instruction_id": instruction_id, "check": check,
                                                        "__doc__": doc, "__module__": __name__})


def _renamed(english: type[Instruction], language: str, ignored: tuple[str, ...]) -> type[Instruction]:
    """IFEval's checker under the language's id; ``ignored`` kwargs (Spanish ``relation`` beside an
    "at least" count) are accepted, validated as the language's relation words, and have no effect."""
    attrs: dict[str, Any] = {"instruction_id": f"{language}:{english.instruction_id}", "__module__": __name__,
                             "__doc__": f"{english.__doc__} (IFEval's checker.)"}
    if ignored:
        attrs["params"] = (*english.params, *ignored)

        def __init__(self, **kwargs: Any) -> None:
            for name in ignored:
                want_relation(language, name, kwargs.pop(name))
            english.__init__(self, **kwargs)

        attrs["__init__"] = __init__
    return type(english.__name__, (english,), attrs)


class IdTable(Mapping):
    """A language's instruction ids -> checker classes: its own classes, and IFEval's checkers for the ids
    the specification declares the same (built at first use, when the registry knows every benchmark)."""

    def __init__(self, language: str, own: tuple[type[Instruction], ...], same: tuple[str, ...],
                 ignoring: Optional[Mapping[str, tuple[str, ...]]] = None):
        self.language, self._own, self._same, self._ignoring = language, own, same, dict(ignoring or {})

    @functools.cached_property
    def _table(self) -> dict[str, type[Instruction]]:
        from ifdistill.benchmarks import registry  # noqa: PLC0415 - IFEval's registration

        english = registry.get(ENGLISH).instructions
        table = {f"{self.language}:{iid}": _renamed(english[iid], self.language, self._ignoring.get(iid, ()))
                 for iid in self._same}
        for cls in self._own:
            if not cls.instruction_id.startswith(f"{self.language}:") or cls.instruction_id in table:
                raise RuntimeError(f"{cls.__name__}: id {cls.instruction_id!r} is not a new {self.language}: id")
            table[cls.instruction_id] = cls
        return dict(sorted(table.items()))

    def __getitem__(self, key: str) -> type[Instruction]:
        return self._table[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)
