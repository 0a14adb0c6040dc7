"""Read an offline W&B run back from its ``.wandb`` file (history, summary, config, metrics, exit).

wandb 0.31 ships no Python reader for offline runs and ``wandb sync`` cannot show one, yet tests (and a
relaunch that must know what W&B holds) must see exactly what was logged. The file is a LevelDB-style
log of protobuf ``Record``s; the format is described in ../shared/notes/wandb-offline.md. A short or
corrupt tail means the writer has not flushed yet: :func:`read_run` retries until the ``exit`` record is
present or the timeout passes.

What a run's offline folders hold is what ``wandb sync`` uploads, and nothing else: ``wandb-core`` keeps
the records of an unfinished 32 KiB block in memory, so a process killed with -9 leaves a file that ends
at its last full block (a short run: the 7-byte header alone), however long ago ``run.log`` returned.
:func:`logged_steps` therefore reads the files back -- the complete records of every folder whose writer
is gone (:func:`writers`) -- to tell which evaluation rows W&B has.
"""

from __future__ import annotations

import glob
import json
import os
import struct
import time
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
STEP_SUFFIX = "/step"  # an evaluation row's step key: <namespace>/step


class NotFlushedError(EOFError):
    """The file ends in a partial record: wandb-core is still writing."""


def iter_records(path: str | os.PathLike, *, complete_only: bool = False,
                 containing: bytes = b"") -> Iterator[Any]:
    """The file's records in order. A partial or corrupt record raises :class:`NotFlushedError`, or with
    ``complete_only`` ends the records there (a killed writer's file: what precedes it is what W&B
    has). ``containing``: only records whose serialised form holds these bytes (the others are not parsed)."""
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
            if complete_only:
                return
            raise NotFlushedError(f"{path}: partial record at byte {pos - HEADER - length}")
        buf = chunk if kind in (FULL, FIRST) else buf + chunk
        if kind in (FULL, LAST) and containing in buf:
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


def parse_run_file(path: str | os.PathLike, *, complete_only: bool = False) -> dict:
    """History, summary, config, metric definitions and exit code of one ``run-*.wandb`` file
    (``complete_only``: :func:`iter_records`)."""
    run: dict = {"id": None, "group": None, "history": [], "summary": {}, "config": {}, "metrics": {}, "exit_code": None}
    for rec in iter_records(path, complete_only=complete_only):
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


def run_file(folder: str | os.PathLike) -> Optional[Path]:
    """The ``run-*.wandb`` file of an offline-run folder; None when its writer was killed before creating it."""
    files = sorted(Path(folder).glob("run-*.wandb"))
    return files[0] if files else None


def writers(paths: Iterable[str | os.PathLike]) -> dict[Path, list[int]]:
    """``{file: pids}`` of the processes of this host that hold one of ``paths`` open (``/proc``; Linux). A
    ``wandb-core`` whose client was killed lives on a moment and could still write: its folder is read once
    no process holds its file."""
    wanted = {os.path.realpath(p): Path(p) for p in paths}
    found: dict[Path, list[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            links = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
        except OSError:  # gone meanwhile, or another user's
            continue
        for target in set(links) & set(wanted):
            found.setdefault(wanted[target], []).append(int(proc.name))
    return found


def logged_steps(wandb_dir: str | os.PathLike, *, exclude: Iterable[str | os.PathLike] = (),
                 wait_s: float = 30.0) -> dict[str, dict[int, int]]:
    """``{namespace: {step: rows}}``: how many history rows of each evaluation step (``<namespace>/step``,
    :mod:`ifdistill.callbacks.eval_logging`) the offline folders under ``wandb_dir`` hold, ``exclude``
    (the folders of runs this process has open) left out. Only complete records count (a killed launch's
    file ends early). A folder whose file another process still holds open is waited for up to
    ``wait_s``; if it is still held then, :class:`WandbFilesBusy` names the process."""
    skip = {os.path.realpath(e) for e in exclude}
    folders = [d for d in find_run_dirs(wandb_dir) if os.path.realpath(d) not in skip]
    files = [f for f in map(run_file, folders) if f is not None]
    deadline = time.monotonic() + wait_s
    busy = writers(files) if files else {}
    while busy and time.monotonic() < deadline:
        time.sleep(0.2)
        busy = writers(files)
    if busy:
        path, pids = next(iter(busy.items()))
        raise WandbFilesBusy(f"{path} is still open in process {', '.join(map(str, pids))}")
    steps: dict[str, dict[int, int]] = {}
    for path in files:
        for rec in iter_records(path, complete_only=True, containing=STEP_SUFFIX.encode()):
            if rec.WhichOneof("record_type") != "history":
                continue
            for item in rec.history.item:
                key = "/".join(item.nested_key) or item.key
                if key.endswith(STEP_SUFFIX) and key.count("/") == 1:
                    counts = steps.setdefault(key[:-len(STEP_SUFFIX)], {})
                    step = int(json.loads(item.value_json))
                    counts[step] = counts.get(step, 0) + 1
    return steps


class WandbFilesBusy(RuntimeError):
    """An offline run's file is held open by another live process (its rows are not final yet)."""


def load_table(run: dict, value: dict) -> dict:
    """Columns and rows of a logged ``wandb.Table`` (a ``table-file`` value from history/summary)."""
    path = Path(run["dir"]) / "files" / value["path"]
    return json.loads(path.read_text())
