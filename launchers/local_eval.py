"""Run a checkpoint evaluation as a local process group that dies with the trainer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any


# The evaluator's supervisor, the leader of its session: on Linux the kernel sends it SIGTERM when the
# trainer dies (prctl PR_SET_PDEATHSIG = 1, kill -9 included), and a SIGTERM -- from the kernel or from
# kill_group -- ends the whole session (the evaluator and vLLM's engine and workers: TERM, 5 s, KILL).
# It exits as the evaluator did (a signal death is re-raised, so poll() still reads -signal).
# A separate process rather than a preexec_fn, which is unsafe in a process with threads.
_SUPERVISOR = """
import ctypes, os, signal, subprocess, sys, time
parent, stopping = int(sys.argv[1]), []
def stop(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stopping.append(time.monotonic())
    os.killpg(0, signal.SIGTERM)
signal.signal(signal.SIGTERM, stop)
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
if os.getppid() != parent:
    os.killpg(0, signal.SIGKILL)
child = subprocess.Popen(sys.argv[2:])
while child.poll() is None:
    if stopping and time.monotonic() - stopping[0] > 5:
        os.killpg(0, signal.SIGKILL)
    time.sleep(0.1)
if stopping:
    os.killpg(0, signal.SIGKILL)
if child.returncode < 0:
    if -child.returncode not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot have a handler
        signal.signal(-child.returncode, signal.SIG_DFL)
    os.kill(os.getpid(), -child.returncode)
sys.exit(child.returncode)
"""


def die_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run under a supervisor that ends it (and all it started) when the calling process dies."""
    return [sys.executable, "-c", _SUPERVISOR, str(os.getpid()), *argv]


class LocalRunner:
    """A child process in its own session (so kill reaches vLLM's engine and worker processes) that dies
    with the trainer (an evaluator outliving a killed trainer would hold its GPU and write to a dead run)."""

    def start(self, job: Any) -> subprocess.Popen:
        with open(job.log_path, "wb") as log:
            return subprocess.Popen(die_with_parent(job.argv), env=job.env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)

    def poll(self, job: Any) -> int | None:
        return job.handle.poll()

    def kill(self, job: Any) -> None:
        kill_group(job.handle)


def kill_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the job's process group, SIGKILL what is left after ``grace_s`` — orphaned children too
    (a killed evaluator can leave vLLM's engine and worker processes behind)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(10.0)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
        pass
