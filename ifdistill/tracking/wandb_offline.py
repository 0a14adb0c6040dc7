"""Read an offline W&B run back from its ``.wandb`` file (history, summary, config, metrics, exit).

wandb 0.31 ships no Python reader for offline runs and ``wandb sync`` cannot show one, yet tests (and
``ifdistill-status`` on a machine without a W&B server) must see exactly what was logged. The file is a
LevelDB-style log of protobuf ``Record``s; the format is described in
../shared/notes/wandb-offline.md. A short or corrupt tail means the writer has not flushed yet:
:func:`read_run` retries until the ``exit`` record is present or the timeout passes.
"""

from __future__ import annotations

import glob
import json
import os
import struct
import time
import zlib
from pathlib import Path
from typing import Any, Iterator

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


class NotFlushedError(EOFError):
    """The file ends in a partial record: wandb-core is still writing."""


def iter_records(path: str | os.PathLike) -> Iterator[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file")
    pos, buf = HEADER, b""
    while pos + HEADER <= len(data):
        room = BLOCK - pos % BLOCK
        if room < HEADER:  # block tail padding
            pos += room
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if kind == 0 and length == 0:  # zero fill up to the next block
            pos += room
            continue
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            raise NotFlushedError(f"{path}: partial record at byte {pos - HEADER - length}")
        buf = chunk if kind in (FULL, FIRST) else buf + chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(buf)
            yield record


def _put(target: dict, item) -> None:
    *parents, last = list(item.nested_key) or [item.key]
    for p in parents:
        target = target.setdefault(p, {})
    target[last] = json.loads(item.value_json)


def _unwrap_config(config: dict) -> dict:
    out = {}
    for k, v in config.items():
        if k == "_wandb":
            continue
        out[k] = v["value"] if isinstance(v, dict) and set(v) == {"value"} else v
    return out


def parse_run_file(path: str | os.PathLike) -> dict:
    run: dict = {"id": None, "group": None, "history": [], "summary": {}, "config": {}, "metrics": {}, "exit_code": None}
    for rec in iter_records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            run["id"], run["group"] = rec.run.run_id, rec.run.run_group or None
            for it in rec.run.config.update:
                _put(run["config"], it)
        elif kind == "config":
            for it in rec.config.update:
                _put(run["config"], it)
        elif kind == "history":
            row: dict = {}
            for it in rec.history.item:
                _put(row, it)
            run["history"].append(row)
        elif kind == "summary":
            for it in rec.summary.update:
                _put(run["summary"], it)
        elif kind == "metric":
            name = rec.metric.name or rec.metric.glob_name
            run["metrics"][name] = rec.metric.step_metric
        elif kind == "exit":
            run["exit_code"] = rec.exit.exit_code
    run["config"] = _unwrap_config(run["config"])
    return run


def find_run_dirs(wandb_dir: str | os.PathLike) -> list[Path]:
    """``offline-run-*`` folders under ``<dir>/wandb`` (or ``dir`` itself), oldest first."""
    root = Path(wandb_dir)
    pattern = str(root / "wandb" / "offline-run-*") if (root / "wandb").is_dir() else str(root / "offline-run-*")
    return sorted(Path(p) for p in glob.glob(pattern))


def read_run(run_dir: str | os.PathLike, timeout_s: float = 10.0) -> dict:
    """Parse one offline run directory, waiting up to ``timeout_s`` for a complete, exited file."""
    files = glob.glob(os.path.join(run_dir, "run-*.wandb"))
    if len(files) != 1:
        raise FileNotFoundError(f"{run_dir}: expected one run-*.wandb file, found {len(files)}")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            run = parse_run_file(files[0])
            if run["exit_code"] is not None or time.monotonic() > deadline:
                run["dir"] = str(run_dir)
                return run
        except NotFlushedError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def load_table(run: dict, value: dict) -> dict:
    """Columns and rows of a logged ``wandb.Table`` (a ``table-file`` value from history/summary)."""
    path = Path(run["dir"]) / "files" / value["path"]
    return json.loads(path.read_text())
