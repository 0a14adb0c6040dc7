"""Who writes a teacher cache, whether that writer is provably gone, and removing what a gone writer left.

A writer is a process: its host, pid and start time (field 22 of ``/proc/<pid>/stat``, clock ticks
since boot, with the boot's id). On its own host a writer is *provably gone* when no process has its
pid, or the process that has it started at another time (the pid was reused), or it is a zombie (killed,
not yet reaped). On another host nothing is provable: there only the claim expiry
(:mod:`~ifdistill.methods.distill.teacher_pass_claims`) or the age of a file decides.

A writer killed in the middle of a shard (``kill -9``) leaves its temp files (``.shard-*.tmp``, named
by the writer's tag: :func:`writer_tag`) and its ``owners/<owner>.json``. Neither is data: a reader
lists only ``shard-*.json`` manifest entries. :func:`clean` removes them -- the next run that takes
over a gone writer's claims calls it, and so does the ``clean`` command::

    python -m ifdistill.methods.distill.teacher_cache_clean CACHE_DIR [--older-than SECONDS]
    make clean-teacher-cache CACHE=CACHE_DIR

``CACHE_DIR`` is ``method.cache_dir`` (every namespace folder under it) or one namespace folder. Files of
writers on other hosts are removed once untouched for ``--older-than`` seconds (default a day).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import socket
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

OWNERS = "owners"
# in a temp file's name: .shard-<hash>.npz.w~<host>~<pid>~<start>~<random>.tmp
_TAG = re.compile(r"\.w~(?P<host>[^~/]+)~(?P<pid>\d+)~(?P<start>[\w-]*)~")


@lru_cache(maxsize=1)
def boot_id() -> str:
    """This boot's id (Linux; empty elsewhere): a start time is only comparable within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> Optional[tuple[str, str]]:
    """``(start time in clock ticks since boot, state)`` of a live process from ``/proc/<pid>/stat``;
    ``None`` when there is no such process (or no ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return fields[19], fields[0]  # field 22 (starttime) and field 3 (state), counted after the name


def me() -> dict[str, Any]:
    """This process as a writer: host, pid, start time and boot."""
    started = process_start(os.getpid())
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": started[0] if started else "",
            "boot": boot_id()}


def writer_tag() -> str:
    """The tag in this process's temp file names (:func:`ifdistill.paths.atomic_write`'s ``tag``)."""
    w = me()
    return f"w~{w['host']}~{w['pid']}~{w['start']}~"


def gone(writer: dict[str, Any]) -> bool:
    """Whether ``writer`` (``host``, ``pid``, ``start``, ``boot``) is provably no longer running: it ran on
    this host and its pid is free, taken by a process that started at another time (or in another boot),
    or a zombie. A writer of another host, or one without a pid, is never provably gone."""
    if writer.get("host") != socket.gethostname() or not str(writer.get("pid", "")).isdigit():
        return False
    if writer.get("boot") and boot_id() and writer["boot"] != boot_id():
        return True
    found = process_start(int(writer["pid"]))
    if found is None:
        try:
            os.kill(int(writer["pid"]), 0)
        except ProcessLookupError:
            return True
        except OSError:  # it exists (another user's process)
            return False
        return False  # alive, its start time unknown (no /proc): not provably gone
    start, state = found
    return state in ("Z", "X") or bool(writer.get("start")) and writer["start"] != start


def owner_file_writer(path: Path) -> Optional[dict[str, Any]]:
    """The writer an ``owners/<owner>.json`` names (``None``: unreadable)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def temp_writer(path: Path) -> Optional[dict[str, Any]]:
    """The writer a temp file's name names (``None``: an untagged temp file)."""
    m = _TAG.search(path.name)
    return {"host": m["host"], "pid": m["pid"], "start": m["start"]} if m else None


@dataclasses.dataclass
class Cleaned:
    """What :func:`clean` removed: temp files and owner files, and their bytes."""

    temp_files: int = 0
    owner_files: int = 0
    bytes: int = 0

    def __bool__(self) -> bool:
        return bool(self.temp_files or self.owner_files)

    def __str__(self) -> str:
        return (f"{self.temp_files} temp file(s) ({self.bytes / 2**20:.1f} MiB) and {self.owner_files} owner "
                "file(s) of writers that are gone")


def _stale(path: Path, writer: Optional[dict[str, Any]], older_than: Optional[float]) -> bool:
    if writer is not None and gone(writer):
        return True
    if older_than is None or (writer is not None and writer.get("host") == socket.gethostname()):
        return False  # a writer on this host that is not provably gone is alive
    try:
        return time.time() - path.stat().st_mtime > older_than
    except OSError:
        return False


def clean(folder: str | os.PathLike, *, older_than: Optional[float] = None) -> Cleaned:
    """Remove from one namespace folder the temp files and owner files of writers that are gone (on this
    host, provably; elsewhere, with ``older_than``, files untouched that many seconds)."""
    folder, out = Path(folder), Cleaned()
    if not folder.is_dir():
        return out
    for path in folder.glob(".*.tmp"):
        if _stale(path, temp_writer(path), older_than):
            try:
                size = path.stat().st_size
                path.unlink()
            except OSError:
                continue
            out.temp_files, out.bytes = out.temp_files + 1, out.bytes + size
    for path in (folder / OWNERS).glob("*.json") if (folder / OWNERS).is_dir() else ():
        if _stale(path, owner_file_writer(path), older_than):
            path.unlink(missing_ok=True)
            out.owner_files += 1
    return out


def namespace_folders(root: str | os.PathLike) -> list[Path]:
    """``root`` itself when it is a namespace folder (holds ``namespace.json``), else those under it."""
    root = Path(root)
    if (root / "namespace.json").is_file():
        return [root]
    return sorted(p.parent for p in root.glob("*/namespace.json"))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ifdistill.methods.distill.teacher_cache_clean",
                                     description="Remove what teacher-cache writers that are gone left behind "
                                                 "(temp shards, owner files); shards and claims are kept.")
    parser.add_argument("cache_dir", help="method.cache_dir, or one namespace folder under it")
    parser.add_argument("--older-than", type=float, default=86400.0,
                        help="seconds untouched after which another host's files count as left behind")
    args = parser.parse_args(argv)
    folders = namespace_folders(args.cache_dir)
    if not folders:
        print(f"teacher-cache clean: error: {args.cache_dir}: no teacher cache here (no namespace.json)",
              file=sys.stderr)
        return 2
    for folder in folders:
        print(f"teacher-cache clean: {folder}: removed {clean(folder, older_than=args.older_than)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
