"""The common shape of an instruction checker (IFEval's and IFBench's) and the validation of its kwargs.

Every instruction type of google's IFEval and of allenai's IFBench is one small subclass of
:class:`Instruction`. An instance is
built once from a row's kwargs (validated here, so a bad row fails before any response is judged) and
then answers one question: :meth:`Instruction.check`, "does this text follow the instruction?".
Instances are immutable, so the scorer can cache them and reuse them across rows and loose variants.

Why validation is strict: the reference builds instructions with ``build_description(**kwargs)`` and,
for a missing or falsy argument, silently draws a *random* one (a random keyword, count or relation).
A row whose kwargs do not fit the instruction therefore has no well-defined reference label. ifdistill
refuses such a row (:class:`InstructionError`) instead of inventing a value. Every parameter the
benchmark uses is required; ``None`` values are dropped first because rows in the Hugging Face layout
carry every possible kwarg of every instruction with ``None``.

Unlike lm-eval, which drops *every* falsy kwarg (``if v``) and so turns ``num_highlights=0`` into a
random count, ifdistill passes values verbatim, as google's code does; on the 541 benchmark prompts
this makes no difference (no kwarg there is 0 or empty).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar

LESS_THAN = "less than"
AT_LEAST = "at least"
RELATIONS = (LESS_THAN, AT_LEAST)


class InstructionError(ValueError):
    """An instruction id or kwargs that cannot be judged; ``field`` says where, relative to the row.

    ``field`` uses the row's own names: ``instruction_id_list[2]`` or ``kwargs[0].num_words``. The
    scorer adds the source and line when it wraps this into an ``InvalidRowError``.
    """

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class InvalidKwargsError(ValueError):
    """A kwarg that does not fit its instruction; ``param`` is the kwarg's name."""

    def __init__(self, param: str, reason: str):
        super().__init__(f"{param}: {reason}")
        self.param = param
        self.reason = reason


def compare(count: int, relation: str, threshold: int) -> bool:
    """The benchmark's two relations: ``less than`` is ``<``, ``at least`` is ``>=``."""
    if relation == LESS_THAN:
        return count < threshold
    return count >= threshold


class Instruction:
    """Base of all checkers: a benchmark id, the kwargs it takes, and a pure ``check``.

    Subclasses set ``instruction_id`` and ``params`` (names of the kwargs, all required) and
    implement ``__init__(**kwargs)`` with the validators below, and ``check(text) -> bool``.
    ``check`` never sees an empty or whitespace-only text: the scorer fails those before any
    checker runs, exactly as the reference does.
    """

    instruction_id: ClassVar[str] = ""
    params: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any] | None) -> Instruction:
        """Build from one row's kwargs dict, dropping ``None`` values; raise ``InvalidKwargsError``."""
        if kwargs is None:
            kwargs = {}
        if not isinstance(kwargs, Mapping):
            raise InvalidKwargsError("", f"expected an object, got {type(kwargs).__name__}")
        given = {k: v for k, v in kwargs.items() if v is not None}
        for name in given:
            if name not in cls.params:
                expected = ", ".join(cls.params) if cls.params else "no kwargs"
                raise InvalidKwargsError(
                    name, f"not a parameter of {cls.instruction_id} (expects {expected})"
                )
        for name in cls.params:
            if name not in given:
                raise InvalidKwargsError(name, f"required by {cls.instruction_id}")
        return cls(**given)

    def check(self, text: str) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{p}={getattr(self, p, '?')!r}" for p in self.params)
        return f"{type(self).__name__}({args})"


# Validators used by the subclasses' constructors. They return the value to store.


def want_count(name: str, value: Any, minimum: int = 0) -> int:
    """A whole number >= ``minimum`` (``bool`` is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidKwargsError(name, f"expected an integer, got {value!r}")
    if value < minimum:
        raise InvalidKwargsError(name, f"must be >= {minimum}, got {value}")
    return value


def want_number(name: str, value: Any, minimum: float = 0) -> int | float:
    """An int or a float (IFBench stores counts as ``12.0``) >= ``minimum``, kept as given so that
    comparisons and arithmetic match the reference's; ``bool`` and NaN are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise InvalidKwargsError(name, f"expected a number, got {value!r}")
    if value < minimum:
        raise InvalidKwargsError(name, f"must be >= {minimum}, got {value}")
    return value


def want_relation(name: str, value: Any) -> str:
    if value not in RELATIONS:
        raise InvalidKwargsError(name, f"expected one of {list(RELATIONS)}, got {value!r}")
    return value


def want_text(name: str, value: Any, *, strip: bool = False) -> str:
    """A string that is not blank; stripped when the reference strips it."""
    if not isinstance(value, str):
        raise InvalidKwargsError(name, f"expected a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidKwargsError(name, "must not be empty")
    return value.strip() if strip else value


def want_text_list(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not value:
        raise InvalidKwargsError(name, f"expected a non-empty list of strings, got {value!r}")
    for item in value:
        if not isinstance(item, str) or not item:
            raise InvalidKwargsError(name, f"expected non-empty strings, got {item!r}")
    return tuple(value)


def want_regex(name: str, pattern: str, flags: int = 0) -> re.Pattern[str]:
    """Compile a kwarg the reference uses as a regular expression (it is not escaped there)."""
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise InvalidKwargsError(name, f"not a valid regular expression ({exc}): {pattern!r}") from None
