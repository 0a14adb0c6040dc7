"""The teacher-pass cache: a frozen teacher's top-k log-probabilities, stored once, read by any run.

What is stored. For every supervised position of a teacher view (the teacher's token sequence and the
positions of the completion tokens in it): the ids of the teacher's ``k`` most probable next tokens, their
log-probabilities (at the configured temperature) and the probability mass outside them (the *tail*).
The divergence on that support (:func:`ifdistill.train.losses.cached_kd_with_stats`) needs nothing else.

Content addressing, two levels:

- the *namespace* (:class:`CacheNamespace`, a folder named by its sha256): the teacher's weights identity
  (sha256 of each weight file, as exports record them: :func:`ifdistill.hashing.weight_hashes`), the
  dtype it runs in, its vocabulary size ``V``, ``k``, the temperature and :data:`FORMAT_VERSION`;
- the *view key* (:func:`view_key`): sha256 of the exact teacher token ids and supervised positions.

A changed model, template, demonstration draw or ``k`` therefore lands in another folder or under
another key: it is a miss, never a wrong hit. ``namespace.json`` in the folder and the namespace id
inside every shard index are checked on open and on read, so a folder copied or renamed under another
namespace is refused (:class:`TeacherCacheError`, one line naming the file).

Layout of one shard (written by one job for one batch of views it claimed,
:mod:`ifdistill.methods.distill.teacher_pass_claims`): ``<name>.npz`` holds
``ids`` (uint16 when ``V <= 65536``, else uint32), ``logp`` (float16; float32 when ``k = V``, where the
cached objective must equal the online one) and ``tail`` (float32), all ``(tokens, k)`` / ``(tokens,)``
in view order; ``<name>.json`` (the manifest entry) lists the view keys and their offsets, the shard's
byte size and sha256. Both are written through :func:`ifdistill.paths.atomic_write` (temp file, fsync,
rename), the data before its manifest entry: a reader sees only complete shards, and a shard whose bytes
do not match its entry (truncated, edited) is refused on read. A temp file's name carries its writer
(host, pid, start time), so what a killed writer left is removed once that writer is provably gone
(:mod:`ifdistill.methods.distill.teacher_cache_clean`).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ifdistill.methods.distill.teacher_cache_clean import writer_tag
from ifdistill.paths import atomic_write, write_text_atomic
from ifdistill.train.method import MethodError
from ifdistill.write_failures import free_space

FORMAT_VERSION = 1
NAMESPACE_FILE = "namespace.json"
# Bytes of shards held in memory at once (each verified once per load): a run reads its views in its own
# order from shards other jobs wrote in theirs, so the budget, not a shard count, keeps reloads rare
# (a 4-shot Qwen3 pass over ~2,300 examples at k=64 is ~0.3 GB).
_LOADED_BYTES = 1 << 30


class TeacherCacheError(MethodError):
    """A cache that cannot be trusted or written; the message is one line naming the file."""


def _one_line(path: Path, what: str) -> TeacherCacheError:
    return TeacherCacheError(f"{path}: {' '.join(what.split())}")


@dataclasses.dataclass(frozen=True)
class CacheNamespace:
    """Everything besides the teacher's input that decides the cached numbers."""

    teacher: Mapping[str, str]  # weight file -> sha256
    dtype: str
    vocab_size: int
    k: int
    temperature: float
    version: int = FORMAT_VERSION
    quantize: Optional[str] = None  # peft.quantize of a frozen_initial teacher (QLoRA's base is quantised)

    def __post_init__(self):
        if not 1 <= self.k <= self.vocab_size:
            raise ValueError(f"teacher cache k must be in [1, V={self.vocab_size}], got {self.k}")

    def to_dict(self) -> dict[str, Any]:
        return {"teacher": dict(sorted(self.teacher.items())), "dtype": self.dtype, "vocab_size": self.vocab_size,
                "k": self.k, "temperature": float(self.temperature), "version": self.version,
                **({"quantize": self.quantize} if self.quantize else {})}

    @property
    def id(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()

    @property
    def id_dtype(self) -> np.dtype:
        return np.dtype(np.uint16 if self.vocab_size <= 1 << 16 else np.uint32)

    @property
    def logp_dtype(self) -> np.dtype:
        return np.dtype(np.float32 if self.k == self.vocab_size else np.float16)


def view_key(teacher_ids: Any, positions: Any) -> str:
    """sha256 of a teacher view: its exact token ids and the positions of its supervised tokens."""
    ids = np.ascontiguousarray(np.asarray(teacher_ids, dtype=np.int64))
    pos = np.ascontiguousarray(np.asarray(positions, dtype=np.int64))
    h = hashlib.sha256()
    h.update(np.int64(ids.size).tobytes())
    h.update(ids.tobytes())
    h.update(pos.tobytes())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class CachedTargets:
    """The cached teacher at ``N`` positions: ``ids`` (N, k) int64, ``logp`` (N, k) float32, ``tail`` (N,)
    float32. Sliced like a tensor, so the chunked objective takes its rows chunk by chunk."""

    ids: torch.Tensor
    logp: torch.Tensor
    tail: torch.Tensor

    def __getitem__(self, rows) -> "CachedTargets":
        return CachedTargets(self.ids[rows], self.logp[rows], self.tail[rows])

    def to(self, device) -> "CachedTargets":
        return CachedTargets(self.ids.to(device), self.logp.to(device), self.tail.to(device))

    @staticmethod
    def cat(parts: Sequence["CachedTargets"]) -> "CachedTargets":
        return CachedTargets(*(torch.cat([getattr(p, f) for p in parts]) for f in ("ids", "logp", "tail")))


class TeacherCache:
    """One namespace folder under ``root``: lookups by view key, shards written atomically.

    ``hits``/``misses`` count lookups; ``written_bytes``/``written_tokens`` what this process stored.
    """

    def __init__(self, root: str | os.PathLike, namespace: CacheNamespace):
        self.namespace = namespace
        self.dir = Path(root) / namespace.id
        self._entries: dict[str, tuple[Path, int, int]] = {}  # key -> (shard manifest entry, start, end)
        self._loaded: collections.OrderedDict[Path, dict[str, np.ndarray]] = collections.OrderedDict()
        self._read: set[str] = set()  # manifest entries already read (an entry never changes once written)
        self.hits = self.misses = 0
        self.written_bytes = self.written_tokens = 0

    # -- opening and the manifest ------------------------------------------------------------------
    def open(self) -> "TeacherCache":
        """Create the folder (and ``namespace.json``) or check the existing one, then read the manifest."""
        ns_file = self.dir / NAMESPACE_FILE
        if ns_file.exists():
            try:
                found = json.loads(ns_file.read_text())
            except (OSError, ValueError) as e:
                raise _one_line(ns_file, f"unreadable teacher-cache namespace ({e})") from None
            if found != self.namespace.to_dict():
                diff = [f"{k}={found.get(k)!r} (expected {v!r})" for k, v in self.namespace.to_dict().items()
                        if found.get(k) != v]
                raise _one_line(ns_file, f"teacher cache built for another teacher or setting: {'; '.join(diff)}")
        else:
            try:
                write_text_atomic(ns_file, json.dumps(self.namespace.to_dict(), indent=1, sort_keys=True) + "\n")
            except OSError as e:
                raise _one_line(ns_file, f"cannot write the teacher cache ({e.strerror or e})") from None
        return self.refresh()

    def refresh(self) -> "TeacherCache":
        """Read the shard manifest entries that other workers added since the last look."""
        for entry in sorted(self.dir.glob("*.json")):
            if entry.name == NAMESPACE_FILE or entry.name in self._read:
                continue
            meta = self._read_entry(entry)
            offsets = meta["offsets"]
            for i, key in enumerate(meta["keys"]):
                self._entries.setdefault(key, (entry, offsets[i], offsets[i + 1]))
            self._read.add(entry.name)
        return self

    def _read_entry(self, entry: Path) -> dict[str, Any]:
        try:
            meta = json.loads(entry.read_text())
        except (OSError, ValueError) as e:
            raise _one_line(entry, f"unreadable teacher-cache manifest entry ({e})") from None
        if meta.get("namespace") != self.namespace.id:
            raise _one_line(entry, f"shard of another teacher cache (namespace {meta.get('namespace')}, "
                                   f"expected {self.namespace.id}: another model, k or temperature)")
        return meta

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def missing(self, keys: Iterable[str]) -> list[str]:
        """The keys not in the cache, in first-seen order without repeats."""
        return [k for k in dict.fromkeys(keys) if k not in self._entries]

    # -- writing -----------------------------------------------------------------------------------
    def write_shard(self, views: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray]]) -> Path:
        """Store ``(key, ids (n, k), logp (n, k), tail (n,))`` per view as one shard; returns its entry.

        The shard is named by its keys, so two workers that compute the same views write the same
        files. On an ``OSError`` (a full disk) nothing of the shard is left behind and the error names
        the file that could not be written.
        """
        ns = self.namespace
        keys = [v[0] for v in views]
        name = "shard-" + hashlib.sha256("\n".join(keys).encode()).hexdigest()[:24]
        counts = [len(v[3]) for v in views]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(int).tolist()
        k = ns.k
        arrays = {"ids": np.concatenate([np.asarray(v[1]).reshape(-1, k) for v in views]).astype(ns.id_dtype),
                  "logp": np.concatenate([np.asarray(v[2]).reshape(-1, k) for v in views]).astype(ns.logp_dtype),
                  "tail": np.concatenate([np.asarray(v[3]).reshape(-1) for v in views]).astype(np.float32)}
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        data = buf.getvalue()
        shard, entry = self.dir / f"{name}.npz", self.dir / f"{name}.json"
        meta = {"namespace": ns.id, "file": shard.name, "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(), "tokens": offsets[-1], "keys": keys, "offsets": offsets}
        for path, payload in ((shard, data), (entry, (json.dumps(meta) + "\n").encode())):
            try:
                with atomic_write(path, "wb", tag=writer_tag()) as f:
                    f.write(payload)
            except OSError as e:
                if path == entry:
                    shard.unlink(missing_ok=True)
                raise _one_line(path, f"cannot write the teacher cache ({e.strerror or e}; {free_space(path)}); "
                                      "nothing of this shard was kept") from None
        for i, key in enumerate(keys):
            self._entries.setdefault(key, (entry, offsets[i], offsets[i + 1]))
        self._read.add(entry.name)
        self.written_bytes += len(data)
        self.written_tokens += offsets[-1]
        return entry

    # -- reading -----------------------------------------------------------------------------------
    def _arrays(self, entry: Path) -> dict[str, np.ndarray]:
        if entry in self._loaded:
            self._loaded.move_to_end(entry)
            return self._loaded[entry]
        meta = self._read_entry(entry)
        shard = self.dir / meta["file"]
        try:
            data = shard.read_bytes()
        except OSError as e:
            raise _one_line(shard, f"teacher-cache shard unreadable ({e.strerror or e})") from None
        if len(data) != meta["bytes"]:
            raise _one_line(shard, f"teacher-cache shard truncated or extended: {len(data)} bytes, its manifest "
                                   f"entry {entry.name} says {meta['bytes']}")
        if hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise _one_line(shard, f"teacher-cache shard altered: sha256 differs from its manifest entry {entry.name}")
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {name: z[name] for name in ("ids", "logp", "tail")}
        if arrays["ids"].shape != (meta["tokens"], self.namespace.k):
            raise _one_line(shard, f"teacher-cache shard holds {arrays['ids'].shape} ids, expected "
                                   f"({meta['tokens']}, {self.namespace.k})")
        self._loaded[entry] = arrays
        while len(self._loaded) > 1 and sum(a.nbytes for v in self._loaded.values()
                                            for a in v.values()) > _LOADED_BYTES:
            self._loaded.popitem(last=False)
        return arrays

    def verify(self, key: str, positions: int) -> None:
        """Check that ``key`` is here, in a shard whose bytes match its entry, with one row per position."""
        entry, start, end = self._entries[key]
        self._arrays(entry)
        if end - start != positions:
            raise _one_line(entry, f"teacher view {key[:16]}... holds {end - start} positions, its view has "
                                   f"{positions}")

    def get(self, key: str) -> CachedTargets:
        """The cached teacher of one view (CPU tensors); ``KeyError`` naming the key when absent."""
        if key not in self._entries:
            self.misses += 1
            raise KeyError(f"teacher view {key[:16]}... is not in the teacher cache {self.dir}")
        self.hits += 1
        entry, start, end = self._entries[key]
        a = self._arrays(entry)
        return CachedTargets(torch.from_numpy(a["ids"][start:end].astype(np.int64)),
                             torch.from_numpy(a["logp"][start:end].astype(np.float32)),
                             torch.from_numpy(a["tail"][start:end]))
