"""Evaluation prompts and demonstration pools, read through the project's one data loader.

Rows go through :func:`ifdistill.data.sources.load_source` (the same normalisation as training data:
Hugging Face kwargs with ``None`` dropped, strict validation naming ``file:line``), so google/IFEval
from the hub and the shared JSONL copy become identical :class:`~ifdistill.data.records.Example` lists.

Data identity for ``eval_config_hash`` is the sha256 of those normalised rows (:func:`rows_sha256`),
not of a path: the same prompts read from the hub, a local copy or a moved file give the same hash,
and any changed, added or removed prompt changes it. The source's own identity (file sha256, or hub
name/config/split/revision) is recorded next to it in results.json.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from ifdistill.data.records import DataError, Example
from ifdistill.data.sources import SourceSpec, load_source
from ifdistill.evaluator.errors import EmptyDatasetError, EvaluatorError
from ifdistill.evaluator.settings import SourceSettings

log = logging.getLogger(__name__)


@dataclasses.dataclass
class LoadedRows:
    """Examples of one source with their identity (``rows_sha256`` enters the config hash)."""

    examples: list[Example]
    rows_sha256: str
    identity: dict[str, Any]


def canonical_row(ex: Example) -> dict[str, Any]:
    """What of an example can change a prompt or a score (not where it was read from)."""
    return {"key": ex.key, "messages": [dict(m) for m in ex.messages],
            "instruction_id_list": list(ex.instruction_id_list or []),
            "kwargs": [dict(k) for k in (ex.kwargs or [])]}


def rows_sha256(examples: list[Example]) -> str:
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps(canonical_row(ex), sort_keys=True, ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()


def _spec(settings: SourceSettings, *, need_completion: bool, path: str | None = None) -> SourceSpec:
    fields = {f.name for f in dataclasses.fields(SourceSpec)}
    values = {k: v for k, v in dataclasses.asdict(settings).items() if k in fields}
    values["need_completion"] = need_completion
    if path is not None:
        values.update(path=path, hf_name=None, hf_config=None, revision=None, synthetic=None)
    try:
        return SourceSpec(**values)
    except ValueError as err:
        raise EvaluatorError(f"data source {settings.name!r}: {err}") from None


def load_rows(settings: SourceSettings, *, need_completion: bool) -> LoadedRows:
    """Read a source (hub first, then ``fallback_path`` when the hub fails) and fingerprint it."""
    fallback = None
    spec = _spec(settings, need_completion=need_completion)  # a config error is the user's, never a reason to fall back
    try:
        loaded = load_source(spec)
    except DataError:
        raise
    except Exception as err:  # a missing file; hub unreachable / offline / unknown dataset
        reason = f"{type(err).__name__}: {str(err)[:300]}"
        if not (settings.hf_name and settings.fallback_path and Path(settings.fallback_path).is_file()):
            raise EvaluatorError(f"cannot load data source {settings.name!r} "
                                 f"({settings.hf_name or settings.path or settings.synthetic}): {reason}") from None
        fallback = reason
        log.warning("cannot load %s from the hub (%s); reading the local copy %s",
                    settings.hf_name, reason, settings.fallback_path)
        loaded = load_source(_spec(settings, need_completion=need_completion, path=settings.fallback_path))
    identity = dict(loaded.stats.identity)
    if fallback:
        identity["fallback_from"] = {"hf_name": settings.hf_name, "revision": settings.revision, "reason": fallback}
    examples = loaded.examples
    return LoadedRows(examples=examples, rows_sha256=rows_sha256(examples),
                      identity={**identity, "num_rows": len(examples), "rows_sha256": rows_sha256(examples)})


def load_eval_rows(settings: SourceSettings) -> LoadedRows:
    """The prompts to evaluate; every row must carry IFEval instructions (the scorer needs them)."""
    rows = load_rows(settings, need_completion=False)
    if not rows.examples:
        where = settings.path or settings.hf_name or f"synthetic:{settings.synthetic}"
        raise EmptyDatasetError(f"evaluation data {settings.name!r} ({where}) holds no prompt"
                                + (f" (max_examples={settings.max_examples})" if settings.max_examples == 0 else ""))
    for ex in rows.examples:
        if not ex.instruction_id_list:
            raise EvaluatorError(f"evaluation row {ex.uid} has no instruction_id_list/kwargs: the IFEval scorer "
                                 "needs rows in the IFEval schema (key, prompt, instruction_id_list, kwargs)")
    keys = [row_key(ex) for ex in rows.examples]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise EvaluatorError(f"evaluation data {settings.name!r} has duplicate key {dup!r}")
    return rows


def row_key(ex: Example) -> str:
    """The key a sample is reported under: the IFEval key, else the row's uid."""
    return ex.key if ex.key is not None else ex.uid
