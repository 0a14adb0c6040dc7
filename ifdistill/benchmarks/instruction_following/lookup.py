"""The checker of an instruction id, whichever instruction benchmark's it is.

Each instruction benchmark's registration (:class:`~ifdistill.benchmarks.instruction_following.instruction_benchmark.InstructionBenchmark`)
holds its own table (``instructions``: id -> checker class, imported from its own folder).
:func:`all_instructions` merges the tables of every registration the benchmark registry knows
(:mod:`ifdistill.benchmarks.registry`), so a row of either benchmark, or one mixing both, is scored by
the one scorer here while this folder imports no benchmark's.

``build_instruction`` caches built checkers (they are immutable), so scoring many rows with the same
prompts validates kwargs and compiles regexes once.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ifdistill.benchmarks.instruction_following.instruction_base import Instruction, InstructionError, InvalidKwargsError


def instruction_sets() -> list[Any]:
    """The registrations that hold instruction checkers (a non-empty ``instructions`` table), in the
    registry's order (the default benchmark first, then by name)."""
    from ifdistill.benchmarks import registry  # noqa: PLC0415 - the registry finds every benchmark

    return [b for b in registry.ordered() if getattr(b, "instructions", None)]


@functools.cache
def all_instructions() -> dict[str, type[Instruction]]:
    """Every instruction id the scorer knows: the union of the registrations' tables. Built at first
    use, when the registry has found every benchmark; an id in two tables is an error."""
    merged: dict[str, type[Instruction]] = {}
    for bench in instruction_sets():
        shared = sorted(set(merged) & set(bench.instructions))
        if shared:
            raise RuntimeError(f"instruction ids registered twice ({bench.name} and another benchmark): {shared}")
        merged.update(bench.instructions)
    return merged


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
