"""Weight-file identity: which files a folder's weight hashes cover, and under which names."""

from __future__ import annotations

import hashlib
import os

from ifdistill.hashing import weight_files, weight_hashes, weight_sha256


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_weight_hashes_of_a_model_dir_and_of_an_export(tmp_path):
    files = {
        "model.safetensors": b"a", "pytorch_model-00001.bin": b"b", "config.json": b"{}",
        "adapter/adapter_model.safetensors": b"c", "adapter/tokenizer.json": b"{}",
        "merged/nested/model.safetensors": b"d",
    }  # fmt: skip
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    # a model directory: its own weight files by name, nothing below it, no other files
    assert weight_hashes(tmp_path) == {"model.safetensors": _digest(b"a"), "pytorch_model-00001.bin": _digest(b"b")}
    # an export: every weight file below it by its relative path, as export.json records them
    assert weight_hashes(tmp_path, recursive=True) == {
        "adapter/adapter_model.safetensors": _digest(b"c"), "merged/nested/model.safetensors": _digest(b"d"),
        "model.safetensors": _digest(b"a"), "pytorch_model-00001.bin": _digest(b"b"),
    }  # fmt: skip
    assert [p.name for p in weight_files(tmp_path / "adapter")] == ["adapter_model.safetensors"]


def test_a_rewritten_weight_file_is_hashed_again(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"before")
    assert weight_sha256(path) == _digest(b"before")
    path.write_bytes(b"after!")  # same size: the memo key must still change (mtime)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
    assert weight_sha256(path) == _digest(b"after!")
