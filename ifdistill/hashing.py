"""Content identity of files: one sha256 helper for data files, weight files and exports, and the one
listing of a folder's weight files that exports record and the evaluator checks."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks (weights can be many GB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@functools.lru_cache(maxsize=256)
def _sha256_cached(path: str, size: int, mtime_ns: int, inode: int) -> str:
    return sha256_file(path)


def weight_sha256(path: str | os.PathLike) -> str:
    """sha256 of a weight file, computed once per process for an unchanged file (size, mtime, inode):
    the export check and the identity in results.json read multi-GB weights once, not twice."""
    path = Path(path)
    st = path.stat()
    return _sha256_cached(str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


def weight_files(folder: str | os.PathLike, *, recursive: bool = False) -> list[Path]:
    """The weight files (:data:`WEIGHT_SUFFIXES`) directly in ``folder``, or with ``recursive`` anywhere
    below it, sorted."""
    root = Path(folder)
    found = root.rglob("*") if recursive else root.iterdir()
    return sorted(p for p in found if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))


def weight_hashes(folder: str | os.PathLike, *, recursive: bool = False) -> dict[str, str]:
    """sha256 of each of :func:`weight_files` by its path relative to ``folder``: a model directory's own
    files (sharded checkpoints included), or with ``recursive`` every part of a training export
    (``adapter/...``, ``merged/...``, ``model/...``, as export.json records them)."""
    root = Path(folder)
    return {p.relative_to(root).as_posix(): weight_sha256(p) for p in weight_files(root, recursive=recursive)}
