"""A checksum recorded inside a JSON result file, so an edit or a truncation after writing is detected.

``results.json`` (the evaluator's) and ``metrics.json`` (a training run's) each carry
``"checksum": "sha256:<hex>"``: the sha256 of the canonical JSON of every other field (keys sorted, no
whitespace, UTF-8). The one writer of each file seals the payload (:func:`seal`) and the one reader
verifies it (:func:`verify`); a file whose content no longer matches is refused with a
:class:`ChecksumError` naming it. Canonical JSON rather than the file's bytes: the check survives
re-indentation by a tool that keeps the content, and catches every change of a value.

A file written before the field existed has no checksum; it is read as it is, with one warning.
A truncated file is not JSON at all: the readers refuse it before a checksum is looked at.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Mapping

FIELD = "checksum"
PREFIX = "sha256:"
log = logging.getLogger(__name__)


class ChecksumError(ValueError):
    """A JSON result file whose content does not match its recorded checksum; the message names it."""


def canonical(payload: Mapping[str, Any]) -> bytes:
    """The bytes the checksum covers: ``payload`` without its checksum field, keys sorted, compact."""
    rest = {k: v for k, v in payload.items() if k != FIELD}
    return json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(payload: Mapping[str, Any]) -> str:
    return PREFIX + hashlib.sha256(canonical(payload)).hexdigest()


def seal(payload: Mapping[str, Any], default: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """``payload`` with its checksum field set, over the content as JSON will read it back
    (``default`` converts values JSON cannot hold, as the writer's ``json.dumps`` does)."""
    as_read = json.loads(json.dumps({k: v for k, v in payload.items() if k != FIELD}, default=default))
    return {**as_read, FIELD: digest(as_read)}


def read_verified(file: str | os.PathLike, error: type[ValueError]) -> Any:
    """``file`` parsed and verified (:func:`verify`); raises ``error`` naming the file when it is not
    JSON (truncated, damaged) or does not match its checksum."""
    try:
        payload = json.loads(Path(file).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise error(f"{file}: invalid JSON, truncated or damaged ({e})") from None
    try:
        return verify(payload, file)
    except ChecksumError as e:
        raise error(str(e)) from None


def verify(payload: Any, file: str | os.PathLike) -> Any:
    """``payload`` (parsed from ``file``) if its checksum matches; a payload without one is returned
    with a warning; raises :class:`ChecksumError` naming ``file`` when it does not match."""
    if not isinstance(payload, dict):
        raise ChecksumError(f"{file}: not a JSON object")
    recorded = payload.get(FIELD)
    if recorded is None:
        log.warning("%s: no checksum (written before checksums were recorded); read unverified", file)
        return payload
    if recorded != digest(payload):
        raise ChecksumError(f"{file}: checksum mismatch: the file was edited or damaged after it was written")
    return payload
