"""The run directory: named by a hash of what is trained, so the same command finds (and resumes) its run.

``config_hash`` is the sha256 of the resolved config with the keys that do not change the trained
weights removed -- paths (where things go), loggers and logging cadence, Hydra's own node, the
``run`` section (resume policy, checkpoint and evaluation cadence) and callbacks -- serialised as
canonical JSON (sorted keys). Two invocations that train the same thing therefore get the same hash
wherever they write and however they log; change a learning rate, a seed, the data or the strategy
and the hash changes. The ignored keys are listed in ``run.hash_ignore`` (dotted paths, ``*`` allowed
as the last component) and recorded in ``run.json`` next to the hash.

Layout of ``<paths.output_root>/<task_name>/runs/<run_id>/`` (``run_id = <run.name>-<hash[:12]>``)::

    run.lock             who trains here now (host, pid, start time); see :class:`RunLock`
    config.yaml          the resolved config (with paths), rewritten at every launch
    run.json             run_id, config_hash, hash_ignore, the hashed config, and one entry per launch
                         (time, host, pid, resumed_from; finished + final_step when it reached the end)
    checkpoints/         Lightning checkpoints: step=000200.ckpt ... (files, or folders for DeepSpeed/FSDP2)
    exports/             HF-format exports for the checkpoint-eval callback (exports/step_000200/)
    logs/                csv/ and wandb/ loggers
    data/                the data manifest

A callback finds everything from the trainer: ``run_dir_of(trainer)`` (set by :func:`train`) or by
reading ``run.json`` in the parent of ``checkpoints/``.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ifdistill.paths import atomic_write

DEFAULT_HASH_IGNORE = (
    "paths", "hydra", "logger", "callbacks", "run", "task_name",
    "trainer.enable_progress_bar", "trainer.enable_model_summary", "trainer.log_every_n_steps",
)
RUN_JSON = "run.json"
RUN_LOCK = "run.lock"
SUBDIRS = ("checkpoints", "exports", "logs", "data")


def _drop(node: Any, path: list[str]) -> None:
    if not isinstance(node, dict) or not path:
        return
    head, rest = path[0], path[1:]
    for key in [k for k in node if fnmatch.fnmatchcase(str(k), head)]:
        if rest:
            _drop(node[key], rest)
        else:
            del node[key]


def hashed_config(cfg: DictConfig | Mapping[str, Any], ignore: Iterable[str] = DEFAULT_HASH_IGNORE) -> dict[str, Any]:
    """The part of the resolved config that determines the trained weights (a plain dict).

    Ignored top-level sections are skipped *before* resolving, so values that only resolve inside a
    Hydra run (``paths.output_dir: ${hydra:runtime.output_dir}``) never have to resolve here.
    """
    ignore = list(ignore)
    top = [d for d in ignore if "." not in d]
    if isinstance(cfg, DictConfig):
        out: dict[str, Any] = {}
        for key in cfg.keys():
            if any(fnmatch.fnmatchcase(str(key), pat) for pat in top):
                continue
            node = cfg[key]
            out[str(key)] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    else:
        out = json.loads(json.dumps(dict(cfg), default=str))
    for dotted in ignore:
        _drop(out, dotted.split("."))
    return out


def config_hash(cfg: DictConfig | Mapping[str, Any], ignore: Iterable[str] = DEFAULT_HASH_IGNORE) -> str:
    """sha256 (hex) of the canonical JSON of :func:`hashed_config`."""
    blob = json.dumps(hashed_config(cfg, ignore), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def run_id(name: str, digest: str) -> str:
    return f"{name}-{digest[:12]}"


class RunDir:
    """Paths inside one run directory (creating nothing until :meth:`create`)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    checkpoints = property(lambda self: self.root / "checkpoints")
    exports = property(lambda self: self.root / "exports")
    logs = property(lambda self: self.root / "logs")
    data = property(lambda self: self.root / "data")
    config_yaml = property(lambda self: self.root / "config.yaml")
    run_json = property(lambda self: self.root / RUN_JSON)
    lock_file = property(lambda self: self.root / RUN_LOCK)

    def create(self) -> RunDir:
        for sub in SUBDIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        return self

    def read_meta(self) -> Optional[dict[str, Any]]:
        return json.loads(self.run_json.read_text()) if self.run_json.is_file() else None

    def write_launch(self, cfg: DictConfig, *, run_id: str, digest: str, ignore: Iterable[str],
                     resumed_from: Optional[str], **extra: Any) -> dict[str, Any]:
        """Write ``config.yaml`` and add this launch to ``run.json`` (atomically; rank 0 only); ``extra``
        fields go into the launch entry (``took_over_lock``: the holder of a stale lock)."""
        self.create()
        meta = self.read_meta() or {"run_id": run_id, "config_hash": digest, "hash_ignore": list(ignore),
                                    "hashed_config": hashed_config(cfg, ignore), "launches": []}
        if meta["config_hash"] != digest:
            raise RuntimeError(f"{self.root} belongs to config_hash {meta['config_hash']}, not {digest}")
        meta["launches"].append({"time": _now(), "resumed_from": resumed_from, "pid": os.getpid(),
                                 "host": socket.gethostname(), **{k: v for k, v in extra.items() if v is not None}})
        _atomic_write(self.config_yaml, OmegaConf.to_yaml(_resolved_where_possible(cfg)))
        _atomic_write(self.run_json, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
        return meta

    def mark_finished(self, final_step: int) -> None:
        """Record that the current launch reached the end of training (``ifdistill-status`` reads it)."""
        self._update_launch(finished=_now(), final_step=int(final_step))

    def mark_stopped(self, step: int, reason: str) -> None:
        """Record that the current launch stopped early for a requeue (checkpoint of ``step`` saved)."""
        self._update_launch(stopped=_now(), stopped_at_step=int(step), stop_reason=reason)

    def _update_launch(self, **fields: Any) -> None:
        meta = self.read_meta()
        if meta and meta.get("launches"):
            meta["launches"][-1].update(fields)
            _atomic_write(self.run_json, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")


class RunLockedError(RuntimeError):
    """Another live process trains in this run directory; the message names it."""


class RunLock:
    """One training launch per run directory at a time: ``run.lock`` held with ``flock`` while training.

    The kernel releases an ``flock`` when its holder dies however it dies (kill -9 included), so a lock
    that can be taken is never in use; the file's content (host, pid, start time, SLURM job) only names
    the holder for the refusal message and, when a launch finds the content of a holder that did not
    finish cleanly, records the takeover (:attr:`took_over`). Where ``flock`` is unsupported (some
    network filesystems) the holder is judged alive by its pid on the same host, and a SLURM job
    re-running after a requeue (same ``SLURM_JOB_ID``) takes its own lock over. Only global rank 0 of a
    launch calls :meth:`acquire`; the other ranks run under its lock.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.took_over: Optional[dict[str, Any]] = None
        self._fd: Optional[int] = None

    @staticmethod
    def me() -> dict[str, Any]:
        return {"host": socket.gethostname(), "pid": os.getpid(), "started": _now(),
                "slurm_job_id": os.environ.get("SLURM_JOB_ID")}

    def holder(self) -> Optional[dict[str, Any]]:
        try:
            text = self.path.read_text()
            return json.loads(text) if text.strip() else None
        except (OSError, ValueError):
            return None

    def acquire(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise RunLockedError(self._refusal(self.holder())) from None
            if not self._holder_gone(self.holder()):  # no flock here (ENOLCK, ...): judge by the pid
                os.close(fd)
                raise RunLockedError(self._refusal(self.holder())) from None
        previous = self.holder()
        if previous and previous.get("pid") != os.getpid():
            self.took_over = previous
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(self.me()) + "\n").encode(), 0)
        os.fsync(fd)
        self._fd = fd
        return self

    def check(self) -> None:
        """Raise :class:`RunLockedError` now if a live process holds the lock; takes nothing, creates
        nothing (a launch calls it before its slower start-up checks, so a duplicate is refused at once)."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EAGAIN, errno.EACCES):
                raise RunLockedError(self._refusal(self.holder())) from None
        finally:
            os.close(fd)

    def release(self) -> None:
        """Empty the file (a clean end: nothing to take over) and drop the lock. The file stays: unlinking
        it would let a process that opened it before the unlink and one that creates it anew both lock."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        finally:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    @staticmethod
    def _holder_gone(h: Optional[dict[str, Any]]) -> bool:
        if not h:
            return True
        job = os.environ.get("SLURM_JOB_ID")
        if job and h.get("slurm_job_id") == job and h.get("pid") != os.getpid():
            return True  # this job, requeued: its earlier run is over
        if h.get("host") != socket.gethostname():
            return False  # cannot tell; refuse and name it
        try:
            os.kill(int(h["pid"]), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, KeyError, ValueError, TypeError):
            return False
        return False

    def _refusal(self, h: Optional[dict[str, Any]]) -> str:
        who = (f"pid {h.get('pid')} on host {h.get('host')}, started {h.get('started')}"
               + (f", SLURM job {h['slurm_job_id']}" if h.get("slurm_job_id") else "")) if h else "another process"
        return (f"run directory {self.path.parent} is in use by {who}; wait for it to finish or stop it "
                f"(if that process is gone, delete {self.path})")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _resolved_where_possible(cfg: DictConfig) -> dict[str, Any]:
    """The config resolved section by section; a section that cannot resolve outside Hydra
    (``paths.output_dir: ${hydra:...}`` in tests that call train() directly) is kept as written."""
    out: dict[str, Any] = {}
    for key in cfg.keys():
        try:
            node = cfg[key]
            out[str(key)] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        except Exception:  # omegaconf raises several interpolation errors
            out[str(key)] = OmegaConf.to_container(cfg, resolve=False)[key]
    return out


def _atomic_write(path: Path, text: str) -> None:
    with atomic_write(path) as f:
        f.write(text)


def run_dir_of(trainer: Any) -> Optional[RunDir]:
    """The :class:`RunDir` a trainer built by :func:`ifdistill.train.run.train` writes to."""
    root = getattr(trainer, "ifdistill_run_dir", None)
    return RunDir(root) if root is not None else None
