"""Judging responses: strict and loose decisions per instruction, and whole rows with validation.

Strict and loose follow the reference exactly:

* **Empty guard.** A response that is empty or whitespace-only after ``str.strip()`` fails every
  instruction, strict and loose, before any checker runs.
* **Strict** judges the response as it is.
* **Loose** builds 8 variants: the response; without its first line; without its last line; without
  both (lines split on ``"\\n"``, re-joined with ``"\\n"`` and ``.strip()``-ed; the response itself
  is not stripped); and each of these four with every ``*`` removed. An instruction passes loose if
  **any** variant that is non-blank passes. Each instruction is judged on its own, so two
  instructions of one prompt may pass on different variants.
* **Prompt level** is ``all(...)`` of the prompt's instruction decisions.

Speed without changing a decision: the variants are built once per response (not once per
instruction), duplicates and blank ones are dropped up front, and since the first loose variant *is*
the strict text, an instruction that passes strict passes loose without being run again; only a
strict failure tries the other variants.

The checkers come from :mod:`.lookup` (every instruction benchmark's table), so rows of either
benchmark, or rows mixing both, are scored alike. ``SCORER_VERSION`` versions the judging here and the
checkers of IFEval, whose protocol this is; it enters the evaluator's config hash, joined by the version
of each other benchmark's checkers a row uses (:func:`scorer_version_for`): bump it whenever any decision
could change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ifdistill.benchmarks.instruction_following import text_analysis
from ifdistill.benchmarks.instruction_following.instruction_base import Instruction, InstructionError
from ifdistill.benchmarks.instruction_following.lookup import _build_cached, build_instruction, instruction_sets

SCORER_VERSION = "ifeval-1"

#: Fields every input row must have, and the four fields scoring adds (in this order).
REQUIRED_FIELDS = ("prompt", "instruction_id_list", "kwargs", "response")
RESULT_FIELDS = ("strict_inst", "loose_inst", "strict_prompt", "loose_prompt")


@dataclasses.dataclass(frozen=True)
class Judgement:
    """Decisions for one response: per instruction (in the row's order) and for the whole prompt."""

    strict_inst: list[bool]
    loose_inst: list[bool]
    strict_prompt: bool
    loose_prompt: bool

    def as_fields(self) -> dict[str, Any]:
        return {
            "strict_inst": list(self.strict_inst),
            "loose_inst": list(self.loose_inst),
            "strict_prompt": self.strict_prompt,
            "loose_prompt": self.loose_prompt,
        }


class InvalidRowError(ValueError):
    """A row that cannot be scored; the message names the source, the 1-based line and the field."""

    def __init__(self, source: str, line: int, field: str, reason: str):
        super().__init__(f"{source}:{line}: field '{field}': {reason}")
        self.source = source
        self.line = line
        self.field = field
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class SkippedRow:
    """A row left out by ``skip_invalid=True``, with where and why."""

    line: int
    field: str
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class ScoredRows:
    """``rows``: the valid input rows, in order, each with the four result fields appended.
    ``skipped``: the rows left out (only with ``skip_invalid=True``)."""

    rows: list[dict[str, Any]]
    skipped: list[SkippedRow] = dataclasses.field(default_factory=list)


def scorer_version_for(instruction_ids: Iterable[str]) -> str:
    """The scorer version an evaluation over these ids records: :data:`SCORER_VERSION`, joined by the
    ``checker_version()`` of each instruction benchmark (in the registry's order) that has one and one of
    whose ids the rows hold (IFBench's: :func:`ifdistill.benchmarks.ifbench.scorer_version`, with its
    ``start_verb`` route). IFEval's checkers add none, so IFEval-only evaluations keep their version,
    and so their config hashes."""
    ids = set(instruction_ids)
    versions = [bench.checker_version() for bench in instruction_sets() if not ids.isdisjoint(bench.instructions)]
    return "+".join([SCORER_VERSION, *(v for v in versions if v)])


def clear_caches() -> None:
    """Drop every memo the scorer keeps (built checkers, text measurements, each benchmark's own);
    decisions never depend on them, this only exists so benchmarks can measure a cold start."""
    _build_cached.cache_clear()
    text_analysis.clear_caches()
    for bench in instruction_sets():
        bench.clear_caches()


def loose_variants(response: str) -> list[str]:
    """The distinct, non-blank variants of ``response`` that loose mode tries, in reference order."""
    lines = response.split("\n")
    without_first = "\n".join(lines[1:]).strip()
    without_last = "\n".join(lines[:-1]).strip()
    without_both = "\n".join(lines[1:-1]).strip()
    candidates = [response, without_first, without_last, without_both]
    if "*" in response:
        candidates += [c.replace("*", "") for c in candidates]
    seen: set[str] = set()
    variants = []
    for candidate in candidates:
        if candidate not in seen and candidate.strip():
            seen.add(candidate)
            variants.append(candidate)
    return variants


def judge(response: str, instructions: Sequence[Instruction]) -> Judgement:
    """Strict and loose decisions of already-built checkers on one response."""
    if not response.strip():
        fails = [False] * len(instructions)
        return Judgement(fails, list(fails), not instructions, not instructions)
    others: list[str] | None = None  # loose variants other than the response, built on demand
    strict_inst, loose_inst = [], []
    for instruction in instructions:
        strict = bool(instruction.check(response))
        loose = strict
        if not strict:
            if others is None:
                others = [v for v in loose_variants(response) if v != response]
            loose = any(instruction.check(v) for v in others)
        strict_inst.append(strict)
        loose_inst.append(loose)
    return Judgement(strict_inst, loose_inst, all(strict_inst), all(loose_inst))


def build_instructions(
    instruction_id_list: Sequence[Any], kwargs: Sequence[Mapping[str, Any] | None]
) -> list[Instruction]:
    """Checkers for one row; raises :class:`InstructionError` naming the bad field."""
    if len(kwargs) != len(instruction_id_list):
        raise InstructionError(
            "kwargs",
            f"has {len(kwargs)} entries for {len(instruction_id_list)} instructions",
        )
    return [
        build_instruction(iid, kw, index)
        for index, (iid, kw) in enumerate(zip(instruction_id_list, kwargs, strict=True))
    ]


def score_response(
    response: str, instruction_id_list: list[str], kwargs: list[dict[str, Any]]
) -> Judgement:
    """Judge one response against a prompt's instructions (``None`` kwargs are dropped).

    Raises :class:`InstructionError` (a ``ValueError``) for an unknown id or unfitting kwargs.
    """
    if not isinstance(response, str):
        raise InstructionError("response", f"expected a string, got {type(response).__name__}")
    return judge(response, build_instructions(instruction_id_list, kwargs))


def _validate(row: Any) -> list[Instruction]:
    """Check a row's fields and build its checkers; raise ``InstructionError`` naming the field."""
    if type(row) is not dict and not isinstance(row, Mapping):
        raise InstructionError("<row>", f"expected a JSON object, got {type(row).__name__}")
    for name in REQUIRED_FIELDS:
        if name not in row:
            raise InstructionError(name, "missing")
    if not isinstance(row["prompt"], str):
        raise InstructionError("prompt", f"expected a string, got {type(row['prompt']).__name__}")
    ids = row["instruction_id_list"]
    if not isinstance(ids, list) or not ids:
        raise InstructionError("instruction_id_list", f"expected a non-empty list, got {ids!r}")
    kwargs = row["kwargs"]
    if not isinstance(kwargs, list):
        raise InstructionError("kwargs", f"expected a list, got {type(kwargs).__name__}")
    if not isinstance(row["response"], str):
        raise InstructionError(
            "response", f"expected a string, got {type(row['response']).__name__}"
        )
    return build_instructions(ids, kwargs)


def score_numbered_rows(
    numbered_rows: Iterable[tuple[int, Any]], *, source: str = "<rows>", skip_invalid: bool = False
) -> ScoredRows:
    """:func:`score_rows` for rows that carry their own line numbers (e.g. a JSONL file with
    blank lines). A row that is an :class:`InstructionError` instance stands for an unparsable line.

    Every row is validated before any is scored, so a bad row fails the call at once, before
    nltk or langdetect are even loaded.
    """
    valid: list[tuple[Mapping[str, Any], list[Instruction]]] = []
    skipped: list[SkippedRow] = []
    for line, row in numbered_rows:
        try:
            if isinstance(row, InstructionError):
                raise row
            valid.append((row, _validate(row)))
        except InstructionError as exc:
            error = InvalidRowError(source, line, exc.field, exc.reason)
            if not skip_invalid:
                raise error from None
            skipped.append(SkippedRow(line, exc.field, exc.reason, str(error)))
    scored: list[dict[str, Any]] = []
    for row, instructions in valid:
        judgement = judge(row["response"], instructions)
        out = {k: v for k, v in row.items() if k not in RESULT_FIELDS}
        out.update(judgement.as_fields())
        scored.append(out)
    return ScoredRows(scored, skipped)


def score_rows(
    rows: list[dict[str, Any]], *, source: str = "<rows>", skip_invalid: bool = False
) -> ScoredRows:
    """Validate and score rows with ``prompt``, ``instruction_id_list``, ``kwargs``, ``response``.

    Returns the rows in order, each a new dict with its own keys (in input order) followed by
    ``strict_inst``, ``loose_inst``, ``strict_prompt``, ``loose_prompt`` (existing fields of these
    names are replaced and moved to the end). A bad row raises :class:`InvalidRowError` naming
    ``source``, its 1-based position and the field; with ``skip_invalid`` it is left out and
    reported in ``ScoredRows.skipped`` instead.
    """
    return score_numbered_rows(
        enumerate(rows, start=1), source=source, skip_invalid=skip_invalid
    )
