"""One training launch per run directory at a time: ``run.lock`` held with ``flock`` while training."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
from pathlib import Path
from typing import Any, Optional

from ifdistill.runs.rundir import now_iso as _now


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
