"""A benchmark's own settings in its ``eval_config_hash``, derived from its settings dataclasses.

Every field of a benchmark's own config sections (``SECTIONS`` of ``ifdistill/benchmarks/<name>/settings.py``)
enters the fingerprint under the section's key (``fingerprint[<key>][<field>]``) without its author
writing a line: :func:`with_own_settings` is applied by the evaluator's core to every plan
(:func:`ifdistill.evaluator.run.prepare`). A field whose value is not what identifies the evaluation --
a path whose *content* the benchmark hashes (lm-eval's ``include_path``: the tasks' documents and configs),
a setting the benchmark's fingerprint records in another form (the judge's weights by digest) -- says
so with :func:`hashed_as` in its ``field(metadata=...)``, naming where it enters instead; that is the only
way out, and tests perturb each such field through a real ``prepare``.

The shared settings (``data``, ``fewshot``, ``generation``, ``backend``, ``dtype``, ``max_model_len``) are
hashed by each benchmark's fingerprint of what it renders and scores (:mod:`ifdistill.evaluator.fingerprint`).

No imports from the evaluator here: a benchmark's settings module imports :func:`hashed_as` while the
``eval`` schema is being built.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Mapping

#: The ``field(metadata=...)`` key of a field that enters the hash in another form (:func:`hashed_as`).
HASHED_AS = "ifdistill_hashed_as"


def hashed_as(where: str) -> dict[str, str]:
    """``field(metadata=hashed_as("..."))``: the field enters eval_config_hash as ``where`` says (its content,
    another form, only in the mode that reads it), not by value."""
    if not where.strip():
        raise ValueError("hashed_as needs the place the field enters the hash instead")
    return {HASHED_AS: where}


def section_identity(section: Any) -> dict[str, Any]:
    """``{field: value}`` of a settings dataclass, nested dataclasses as dicts, fields marked
    :func:`hashed_as` left out (a nested section left with no field is left out too)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(section):
        if HASHED_AS in f.metadata:
            continue
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            value = section_identity(value)
            if not value:
                continue
        else:
            value = _plain(value)
        out[f.name] = value
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def field_paths(cls: type, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field]]:
    """``(dotted path, field)`` of every leaf field of a settings dataclass ``cls`` (nested ones walked)."""
    import typing

    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints.get(f.name)
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            yield from field_paths(kind, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}", f


def with_own_settings(fingerprint: Mapping[str, Any], sections: Mapping[str, Any]) -> dict[str, Any]:
    """``fingerprint`` with each of a benchmark's own ``sections`` (``{key: settings object}``) merged into
    ``fingerprint[key]`` (:func:`section_identity`). A value the benchmark's fingerprint already holds under
    the same name must be the setting's: else ``ValueError`` (a fingerprint contradicting its config)."""
    out = dict(fingerprint)
    for key, section in sections.items():
        derived = section_identity(section)
        if not derived:
            continue
        own = out.get(key) or {}
        if not isinstance(own, Mapping):
            raise ValueError(f"fingerprint[{key!r}] is not a section; eval.{key}'s settings cannot enter it")
        clash = sorted(k for k in derived if k in own and own[k] != derived[k])
        if clash:
            raise ValueError(f"fingerprint[{key!r}] holds {clash} with values other than eval.{key}'s")
        out[key] = {**own, **derived}
    return out
