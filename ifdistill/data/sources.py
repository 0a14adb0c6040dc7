"""Where examples come from: local JSONL / JSON / Parquet files, Hugging Face datasets, the synthetic set.

A :class:`SourceSpec` names one source; :func:`load_source` reads it into normalised
:class:`~ifdistill.data.records.Example` objects plus the bookkeeping the manifest needs: how many rows
were read, filtered (``verified_only``), or skipped as invalid and why, and the source's identity --
the sha256 of each local file, or the Hugging Face name, config, split and revision.

Strict by default: the first bad row raises :class:`~ifdistill.data.records.DataError` naming
``file:line`` and the field. ``tolerant=True`` skips bad rows instead and counts them by kind (with the
first few locations) so the manifest shows what was left out. A Hugging Face dataset without a pinned
``revision`` loads (the hub's current main), but the manifest marks it ``unpinned``: two runs of the
same config may then see different data.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ifdistill.hashing import sha256_file
from ifdistill.data.records import DataError, Example, normalise_row

log = logging.getLogger(__name__)

MAX_LOCATIONS = 5  # error locations kept per kind in the stats


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """One data source. Exactly one of ``path``, ``hf_name`` or ``synthetic`` is set.

    ``synthetic`` names a split of the embedded generator (``train``, ``eval``, ``chat``).
    ``weight`` matters only for replay sources (their share of the replay examples).
    """

    name: str
    path: str | None = None
    hf_name: str | None = None
    hf_config: str | None = None
    split: str = "train"
    revision: str | None = None
    synthetic: str | None = None
    layout: str = "auto"
    verified_only: bool = False
    max_examples: int | None = None
    weight: float = 1.0
    need_completion: bool = True

    def __post_init__(self):
        given = [k for k in ("path", "hf_name", "synthetic") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(f"source {self.name!r}: set exactly one of path, hf_name, synthetic (got {given})")
        if self.weight <= 0:
            raise ValueError(f"source {self.name!r}: weight must be > 0, got {self.weight}")

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> SourceSpec:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(m) - fields
        if unknown:
            raise ValueError(f"source {m.get('name', '?')!r}: unknown keys {sorted(unknown)}; known: {sorted(fields)}")
        return cls(**dict(m))


@dataclasses.dataclass
class SourceStats:
    """What loading a source did, for the manifest."""

    rows_read: int = 0
    rows_unverified: int = 0
    rows_invalid: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    invalid_locations: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    identity: dict[str, Any] = dataclasses.field(default_factory=dict)

    def record_invalid(self, err: DataError) -> None:
        self.rows_invalid[err.kind] += 1
        locs = self.invalid_locations.setdefault(err.kind, [])
        if len(locs) < MAX_LOCATIONS:
            locs.append(str(err))

    def to_dict(self) -> dict[str, Any]:
        return {"rows_read": self.rows_read, "rows_unverified": self.rows_unverified,
                "rows_invalid": dict(self.rows_invalid), "invalid_examples": self.invalid_locations,
                "identity": self.identity}


@dataclasses.dataclass
class LoadedSource:
    spec: SourceSpec
    examples: list[Example]
    stats: SourceStats


BOM = "\ufeff"  # a UTF-8 byte-order mark: spreadsheet exports and some editors start files with it


def text_lines(path: Path) -> Iterator[tuple[int, str | UnicodeDecodeError]]:
    """``(1-based line number, text)`` per line of a UTF-8 file, decoded line by line so that bytes
    that are not UTF-8 are reported by line (an error in place of the text); a leading byte-order
    mark is dropped."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield lineno, e
                continue
            yield lineno, (line.removeprefix(BOM) if lineno == 1 else line)


def not_utf8(err: UnicodeDecodeError) -> str:
    """What is wrong with a line that is not UTF-8 (``err`` from :func:`text_lines`), naming the byte
    (0-based, within the line)."""
    return f"not UTF-8 text (byte {err.start}: {err.object[err.start:err.start + 4]!r}...)"


class BadLine(ValueError):
    """A line of a JSON-lines file that is not UTF-8 or not JSON; its text names ``file:line`` and what is wrong."""


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """``(1-based line number, value)`` per non-blank line of a JSON-lines file (read by :func:`text_lines`);
    raises :class:`BadLine` at the first line that is not UTF-8 or not JSON. The readers of a benchmark's own
    files turn it into their error, so every such file answers a broken line the same way."""
    for lineno, line in text_lines(path):
        if isinstance(line, UnicodeDecodeError):
            raise BadLine(f"{path}:{lineno}: {not_utf8(line)}")
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadLine(f"{path}:{lineno}: invalid JSON ({e.msg})") from None
        yield lineno, value


class _DuplicateField(ValueError):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _unique_fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: an object that names a field twice is refused (JSON's
    default keeps the last value without a word, so ``{"response": "", "response": "Hi"}`` reads as "Hi")."""
    out: dict[str, Any] = {}
    for name, value in pairs:
        if name in out:
            raise _DuplicateField(name)
        out[name] = value
    return out


def parse_json(text: str, location: str) -> Any:
    """JSON text as Python values, an object with a repeated field refused (a :class:`DataError` naming it)."""
    try:
        return json.loads(text, object_pairs_hook=_unique_fields)
    except _DuplicateField as e:
        raise DataError("duplicate_field", "the field appears twice in one JSON object (which one is meant?)",
                        location=location, field=e.name) from None


def _jsonl_rows(path: Path) -> Iterator[tuple[str, str, Any]]:
    """(row_id, location, row) per non-blank line; a malformed line yields a DataError as the row."""
    for lineno, line in text_lines(path):
        loc = f"{path}:{lineno}"
        if isinstance(line, UnicodeDecodeError):
            yield str(lineno), loc, DataError("malformed_json", not_utf8(line), location=loc)
            continue
        if not line.strip():
            continue
        try:
            row = parse_json(line, loc)
        except json.JSONDecodeError as e:
            row = DataError("malformed_json", f"not valid JSON ({e.msg} at column {e.colno})", location=loc)
        except DataError as e:
            row = e
        yield str(lineno), loc, row


def _json_rows(path: Path) -> Iterator[tuple[str, str, Any]]:
    lines = []
    for lineno, line in text_lines(path):  # a UTF-8 sequence never spans a newline: same text as a whole read
        if isinstance(line, UnicodeDecodeError):
            raise DataError("malformed_json", not_utf8(line), location=f"{path}:{lineno}")
        lines.append(line)
    text = "".join(lines)
    try:
        data = parse_json(text, str(path))
    except json.JSONDecodeError as e:
        raise DataError("malformed_json", f"not valid JSON ({e.msg} at line {e.lineno})", location=str(path)) from None
    if isinstance(data, Mapping) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise DataError("wrong_type", "a .json source must hold a list of rows (or {'data': [...]})",
                        location=str(path))
    for i, row in enumerate(data):
        yield str(i), f"{path}:[{i}]", row


def _parquet_rows(path: Path) -> Iterator[tuple[str, str, Any]]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    i = 0
    for batch in table.iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            yield str(i), f"{path}:row {i}", row
            i += 1


def _local_files(spec: SourceSpec) -> list[Path]:
    p = Path(spec.path).expanduser()
    if p.is_dir():
        files = sorted(q for q in p.iterdir() if q.suffix in (".jsonl", ".json", ".parquet"))
    elif any(c in str(p) for c in "*?["):
        files = sorted(p.parent.glob(p.name))
    else:
        files = [p]
    if not files or not all(f.is_file() for f in files):
        raise FileNotFoundError(f"source {spec.name!r}: no data file at {spec.path}")
    return files


def _rows(spec: SourceSpec, stats: SourceStats) -> Iterator[tuple[str, str, Any]]:
    if spec.synthetic:
        from ifdistill.data.synthetic import synthetic_paths

        paths = synthetic_paths()
        if spec.synthetic not in paths:
            raise ValueError(f"source {spec.name!r}: unknown synthetic split {spec.synthetic!r}; have {sorted(paths)}")
        path = paths[spec.synthetic]
        stats.identity = {"kind": "synthetic", "split": spec.synthetic, "path": str(path), "sha256": sha256_file(path)}
        yield from _jsonl_rows(path)
        return
    if spec.path:
        files = _local_files(spec)
        stats.identity = {"kind": "local", "files": [{"path": str(f), "sha256": sha256_file(f)} for f in files]}
        for f in files:
            reader = {".parquet": _parquet_rows, ".json": _json_rows}.get(f.suffix, _jsonl_rows)
            multi = len(files) > 1
            for row_id, loc, row in reader(f):
                yield (f"{f.name}:{row_id}" if multi else row_id), loc, row
        return
    import datasets  # imported lazily: slow, and not needed for local files

    ds = datasets.load_dataset(spec.hf_name, spec.hf_config, split=spec.split, revision=spec.revision)
    stats.identity = {"kind": "hf", "name": spec.hf_name, "config": spec.hf_config, "split": spec.split,
                      "revision": spec.revision or "unpinned", "fingerprint": getattr(ds, "_fingerprint", None),
                      "num_rows": len(ds)}
    for i, row in enumerate(ds):
        yield str(i), f"{spec.hf_name}[{spec.hf_config or 'default'}/{spec.split}]#{i}", row


def load_source(spec: SourceSpec, *, tolerant: bool = False) -> LoadedSource:
    """Read and normalise a source; raise on the first bad row unless ``tolerant``.

    A row whose IFEval ``key`` (or ``id``) an earlier row of the source already has is a bad row
    (``duplicate_key``): the key names a prompt in results, samples and demonstration exclusion, so a
    repeat is refused, never silently weighted twice. ``tolerant`` keeps the first and skips the others."""
    stats = SourceStats()
    examples: list[Example] = []
    seen: dict[str, str] = {}  # "key 7" / "id x" -> the location of the row that has it
    answer: str | None = None  # the answer's field in this source's rows (completion or response)
    for row_id, loc, row in _rows(spec, stats):
        if spec.max_examples is not None and len(examples) >= spec.max_examples:
            break
        stats.rows_read += 1
        try:
            if isinstance(row, DataError):
                raise row
            named = None
            if isinstance(row, Mapping) and "id" in row and "key" not in row and isinstance(row["id"], (str, int)):
                row_id, named = str(row["id"]), ("id", str(row["id"]))
            ex = normalise_row(row, source=spec.name, row_id=row_id, location=loc, layout=spec.layout,
                               verified_only=spec.verified_only, need_completion=spec.need_completion,
                               completion_name=answer)
            named = ("key", row["key"]) if isinstance(row, Mapping) and row.get("key") is not None else named
            if named is not None:
                label = f"{named[0]} {named[1]!r}"
                if label in seen:
                    raise DataError("duplicate_key", f"{label} is also the {named[0]} of {seen[label]}",
                                    location=loc, field=named[0])
                seen[label] = loc
        except DataError as e:
            if not tolerant:
                raise
            stats.record_invalid(e)
            continue
        if answer is None and isinstance(row, Mapping):
            answer = next((f for f in ("completion", "response") if f in row), None)
        if ex is None:
            stats.rows_unverified += 1
            continue
        examples.append(ex)
    if stats.rows_invalid:
        log.warning("data source %r: skipped %d invalid row(s) of %d (%s; data.tolerant=true), first: %s",
                    spec.name, sum(stats.rows_invalid.values()), stats.rows_read,
                    ", ".join(f"{k} {n}" for k, n in sorted(stats.rows_invalid.items())),
                    next(iter(stats.invalid_locations.values()))[0])
    return LoadedSource(spec=spec, examples=examples, stats=stats)
