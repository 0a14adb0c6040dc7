"""Content identity of files: one sha256 helper for data files, weight files and exports."""

from __future__ import annotations

import hashlib
import os

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks (weights can be many GB)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
