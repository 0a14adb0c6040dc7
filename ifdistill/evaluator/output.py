"""The evaluator's output directory (``results.json`` + ``samples.jsonl``): file names, metric names, reader.

The one reader of that format. The evaluator writes it (:mod:`ifdistill.evaluator.results`, checked
against :data:`ifdistill.evaluator.schema.RESULTS_SCHEMA`); the checkpoint-eval callback, back-fill,
the loggers, ``ifdistill-report``, ``ifdistill-status`` and the demo read it here. Readers that need
the payload as written (to store it in ``metrics.json`` or log it) use :func:`read_results_json`;
everything else sees an :class:`EvalOutput` (aggregates under lm-eval's names, per-instruction-type
accuracy, the config hash) and per-prompt pass/fail vectors keyed by the prompt's key.

Tolerated variations (each seen or plausible in an evaluator's history):

- aggregates nested under ``"metrics"`` or at the top level of results.json (which ones exist is the
  benchmark's: :mod:`ifdistill.benchmarks.registry`);
- per-type accuracy under ``"per_instruction_type"`` (``{id: {strict_acc, loose_acc, count}}``);
- a sample's instruction ids under ``instruction_id_list`` (IFEval's name) or ``instruction_ids``;
- a sample's key under ``key`` (IFEval) or ``id``; without either, its line number.

A directory without ``results.json`` is not a result: the evaluator writes it last (atomically), so
its absence means the evaluation never finished.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from ifdistill import checksum
from ifdistill.benchmarks.registry import benchmark_of, of_results

RESULTS_FILE = "results.json"
SAMPLES_FILE = "samples.jsonl"
MODES = ("strict", "loose")
__all__ = ["RESULTS_FILE", "SAMPLES_FILE", "EvalOutput", "PromptResult", "benchmark_of", "iter_sample_rows", "load",
           "read_results", "read_results_json", "metric_values"]


class EvalOutputError(ValueError):
    """An evaluator output directory that cannot be read; the message names the file."""


def is_eval_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / RESULTS_FILE).is_file()


@dataclasses.dataclass(frozen=True)
class PromptResult:
    """One prompt's decisions: ``strict_inst``/``loose_inst`` per instruction (in order); ``values``: the
    row's own values of metrics that are not made of them (its ``metrics``: reliable@k, ...)."""

    key: str
    instruction_ids: tuple[str, ...]
    strict_inst: tuple[bool, ...]
    loose_inst: tuple[bool, ...]
    strict_prompt: bool
    loose_prompt: bool
    response: str | None = None
    values: Mapping[str, float] = dataclasses.field(default_factory=dict, compare=False)

    def inst(self, mode: str) -> tuple[bool, ...]:
        return self.strict_inst if mode == "strict" else self.loose_inst

    def prompt(self, mode: str) -> bool:
        return self.strict_prompt if mode == "strict" else self.loose_prompt


def _prompt_result(row: Mapping[str, Any], line: int, source: Path) -> PromptResult:
    try:
        ids = row.get("instruction_id_list", row.get("instruction_ids"))
        strict_inst = tuple(bool(x) for x in row["strict_inst"])
        loose_inst = tuple(bool(x) for x in row["loose_inst"])
        key = row.get("key", row.get("id", line))
        return PromptResult(
            key=str(key),
            instruction_ids=tuple(ids) if ids is not None else ("?",) * len(strict_inst),
            strict_inst=strict_inst,
            loose_inst=loose_inst,
            strict_prompt=bool(row.get("strict_prompt", all(strict_inst))),
            loose_prompt=bool(row.get("loose_prompt", all(loose_inst))),
            response=row.get("response"),
            values={k: float(v) for k, v in (row.get("metrics") or {}).items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)},
        )
    except (KeyError, TypeError) as e:
        raise EvalOutputError(f"{source}:{line}: not a scored sample ({type(e).__name__}: {e})") from None


def read_samples(path: str | os.PathLike) -> list[PromptResult]:
    """The rows of ``samples.jsonl`` (a directory or the file itself), in file order."""
    path = Path(path)
    if path.is_dir():
        path = path / SAMPLES_FILE
    out = []
    with open(path) as f:
        for line_no, line in enumerate(f, start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise EvalOutputError(f"{path}:{line_no}: invalid JSON ({e})") from None
                out.append(_prompt_result(row, line_no, path))
    keys = [r.key for r in out]
    if len(set(keys)) != len(keys):
        raise EvalOutputError(f"{path}: duplicate prompt keys; pairing by key would be ambiguous")
    return out


@dataclasses.dataclass
class EvalOutput:
    """One evaluation: aggregates, per-type accuracy, identity; samples are read on first use."""

    path: Path
    metrics: dict[str, Any]
    per_instruction_type: dict[str, dict[str, Any]]
    eval_config_hash: str | None
    eval_config: dict[str, Any]
    model: dict[str, Any]
    raw: dict[str, Any]

    @cached_property
    def samples(self) -> list[PromptResult] | None:
        """Per-prompt results, or ``None`` when the directory has no samples.jsonl."""
        if not (self.path / SAMPLES_FILE).is_file():
            return None
        return read_samples(self.path)

    @cached_property
    def rows(self) -> list[dict[str, Any]] | None:
        """samples.jsonl's rows as written (any benchmark's), or ``None`` without one."""
        if not (self.path / SAMPLES_FILE).is_file():
            return None
        return list(iter_sample_rows(self.path))

    @property
    def num_prompts(self) -> int | None:
        n = self.metrics.get("num_prompts", self.raw.get("num_prompts"))
        if n is None and isinstance(self.raw.get("counts"), Mapping):
            n = self.raw["counts"].get("num_prompts", self.raw["counts"].get("prompts"))
        return n


def _aggregates(results: Mapping[str, Any]) -> dict[str, Any]:
    nested = results.get("metrics")
    if isinstance(nested, Mapping):
        return dict(nested)
    return {k: v for k, v in results.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def metric_values(results: Mapping[str, Any]) -> dict[str, float]:
    """The aggregates and their standard errors (``<metric>_stderr``) as floats, absent or null values left
    out, as the results' benchmark reads them (:meth:`~ifdistill.benchmarks.base.Benchmark.metric_values`)."""
    return of_results(results).metric_values(results)


def from_results(path: str | os.PathLike, results: Mapping[str, Any]) -> EvalOutput:
    """An :class:`EvalOutput` from already-parsed results.json content (``path`` holds the samples)."""
    metrics = _aggregates(results)
    missing = [m for m in of_results(results).required_metrics if m not in of_results(results).metric_values(results)]
    if missing:
        raise EvalOutputError(f"{Path(path) / RESULTS_FILE}: no aggregate(s) {', '.join(missing)}")
    config = results.get("config", results.get("eval_config", {}))
    return EvalOutput(
        path=Path(path),
        metrics=metrics,
        per_instruction_type=dict(results.get("per_instruction_type", {})),
        eval_config_hash=results.get("eval_config_hash"),
        eval_config=dict(config) if isinstance(config, Mapping) else {},
        model=dict(results.get("model", {})) if isinstance(results.get("model"), Mapping) else {},
        raw=dict(results),
    )


def read_results_json(path: str | os.PathLike) -> dict[str, Any]:
    """``<path>/results.json`` as written; raises :class:`EvalOutputError` naming the file if it is
    missing, not JSON (e.g. truncated) or does not match its recorded checksum (:mod:`ifdistill.checksum`)."""
    file = Path(path) / RESULTS_FILE
    if not file.is_file():
        raise EvalOutputError(f"{file}: missing (an unfinished or failed evaluation?)")
    return checksum.read_verified(file, EvalOutputError)


def iter_sample_rows(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The rows of ``<path>/samples.jsonl`` as written, lazily (a reader that needs only the first few
    stops early); raises :class:`EvalOutputError` naming the file and line of a row that is not JSON."""
    file = Path(path) / SAMPLES_FILE
    with open(file, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise EvalOutputError(f"{file}:{line_no}: invalid JSON ({e})") from None


def read_results(path: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(results.json, samples.jsonl rows)`` of a finished evaluation, both as written."""
    return read_results_json(path), list(iter_sample_rows(path))


def load(path: str | os.PathLike) -> EvalOutput:
    """Read ``<path>/results.json``; raises :class:`EvalOutputError` if it is missing or incomplete."""
    return from_results(path, read_results_json(path))


def paired_samples(a: Sequence[PromptResult], b: Sequence[PromptResult]
                   ) -> tuple[list[PromptResult], list[PromptResult]]:
    """The prompts both evaluations scored, aligned by key (in ``a``'s order).

    Pairing by key rather than by position: two evaluations of the same data can list prompts in
    different orders, and a paired test on misaligned prompts would be silently meaningless.
    A key whose instruction ids differ between the two is a different prompt and raises.
    """
    by_key = {r.key: r for r in b}
    left, right = [], []
    for r in a:
        other = by_key.get(r.key)
        if other is None:
            continue
        if other.instruction_ids != r.instruction_ids:
            raise EvalOutputError(f"prompt {r.key!r} has different instructions in the two evaluations")
        left.append(r)
        right.append(other)
    return left, right
