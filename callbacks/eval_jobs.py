"""A bounded queue of evaluator processes that never blocks or breaks training.

Each checkpoint evaluation is a separate OS process (the same ``ifdistill-eval`` program a researcher runs
by hand), started in its own session so a crash, an OOM kill or a hang stays outside the trainer.
The trainer polls the queue between steps (:meth:`EvalQueue.poll`): finished jobs are reported once,
failed ones are retried up to ``retries`` times (not an input error, exit code 2: a corrupt or non-finite
export fails the same way again), and a job past ``timeout_s`` is killed (its whole
process group, vLLM's engine and workers included) and counts as a failure.

When evaluations fall behind (``max_running`` jobs running and ``max_pending`` waiting), ``policy`` says
what happens to a new checkpoint: ``wait`` blocks training until a slot frees (no evaluation is lost),
``skip_new`` records the new one as skipped, ``drop_oldest`` drops the oldest waiting one (recorded too).
Nothing is dropped silently: every skip is an event the callback records.

Where a job runs is its runner (:mod:`ifdistill.launchers`): a child process group on this node by
default, or one SLURM job per evaluation.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable, Literal

from ifdistill.evaluator.output import RESULTS_FILE
from ifdistill.launchers.runners import Runner, make_runner

Policy = Literal["wait", "skip_new", "drop_oldest"]
POLICIES: tuple[str, ...] = ("wait", "skip_new", "drop_oldest")
INPUT_ERROR_EXIT = 2  # ifdistill-eval's exit code for bad input (an export with NaN weights, a bad config)
#: An evaluation running longer is killed and counts as failed: a guard against a hung evaluator, generous
#: enough for the full IFEval (541 prompts, 1,280 new tokens) on the HF backend of a small GPU.
EVAL_TIMEOUT_S = 7200.0


@dataclasses.dataclass
class EvalJob:
    step: int
    export_dir: Path
    out_dir: Path
    argv: list[str]
    env: dict[str, str]
    attempt: int = 0
    handle: Any = None  # the runner's handle: a Popen, or a SLURM job id
    started: float = 0.0
    log_path: Path | None = None
    benchmark: str | None = None  # an extra benchmark's name (callbacks.checkpoint_eval.evals); None: ``eval``
    runner_retry: str | None = None  # why the runner itself retried the job (reported once, as ``failed``)


@dataclasses.dataclass
class EvalEvent:
    """What happened to a job: ``ok`` (results in out_dir), ``failed`` (will retry), ``gave_up``, ``skipped``."""

    kind: Literal["ok", "failed", "gave_up", "skipped"]
    job: EvalJob
    reason: str = ""
    exit_code: int | None = None
    log_tail: str = ""


def _tail(path: Path | None, limit: int = 4000) -> str:
    if path is None or not path.is_file():
        return ""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - limit))
        return f.read().decode("utf-8", "replace")


class EvalQueue:
    def __init__(self, *, max_running: int = 1, max_pending: int = 4, policy: Policy = "wait",
                 timeout_s: float = EVAL_TIMEOUT_S, retries: int = 1, poll_interval_s: float = 1.0,
                 is_complete: Callable[[Path], bool] = lambda out: (out / RESULTS_FILE).is_file(),
                 clock: Callable[[], float] = time.monotonic, runner: Runner | None = None):
        if policy not in POLICIES:
            raise ValueError(f"eval queue policy must be one of {', '.join(POLICIES)}, not {policy!r}")
        self.max_running, self.max_pending, self.policy = max_running, max_pending, policy
        self.timeout_s, self.retries, self.poll_interval_s = timeout_s, retries, poll_interval_s
        self.is_complete, self.clock = is_complete, clock
        self.runner: Runner = make_runner(runner)
        self.running: list[EvalJob] = []
        self.pending: collections.deque[EvalJob] = collections.deque()
        self._events: list[EvalEvent] = []

    # -- submission -----------------------------------------------------------------------------
    def submit(self, job: EvalJob) -> list[EvalEvent]:
        """Queue a job; returns the events that happened meanwhile (including skips)."""
        if len(self.pending) >= self.max_pending and len(self.running) >= self.max_running:
            if self.policy == "skip_new":
                self._events.append(EvalEvent("skipped", job, "evaluation queue full (policy skip_new)"))
                return self.poll()
            if self.policy == "drop_oldest":
                old = self.pending.popleft()
                self._events.append(EvalEvent("skipped", old, "dropped for a newer checkpoint (policy drop_oldest)"))
            else:  # wait: block until a slot frees
                while len(self.pending) >= self.max_pending and len(self.running) >= self.max_running:
                    self._reap()
                    self._start_pending()
                    if len(self.pending) >= self.max_pending and len(self.running) >= self.max_running:
                        time.sleep(self.poll_interval_s)
        self.pending.append(job)
        return self.poll()

    # -- progress -------------------------------------------------------------------------------
    def poll(self) -> list[EvalEvent]:
        """Non-blocking: reap finished/timed-out jobs, start waiting ones, return new events."""
        self._reap()
        self._start_pending()
        events, self._events = self._events, []
        return events

    def busy(self) -> bool:
        return bool(self.running or self.pending)

    def drain(self, timeout_s: float, each: Callable[[list[EvalEvent]], None] | None = None) -> list[EvalEvent]:
        """Wait up to ``timeout_s`` for every job; returns all events (unfinished jobs stay queued). ``each``
        receives the new events as they come, so a caller records each result when it is there, not at the
        end (a process killed while it waits loses none it was given)."""
        deadline = self.clock() + timeout_s
        events: list[EvalEvent] = []
        while True:
            new = self.poll()
            if new and each is not None:
                each(new)
            events += new
            if not self.busy() or self.clock() >= deadline:
                return events
            time.sleep(self.poll_interval_s)

    def abandon(self) -> list[EvalJob]:
        """Kill running jobs and forget waiting ones; returns them (the caller records them as missing)."""
        left = list(self.running) + list(self.pending)
        for job in self.running:
            self.runner.kill(job)
        self.running, self.pending = [], collections.deque()
        return left

    def close(self) -> None:
        """Release what the runner keeps between jobs (a long-lived evaluator server); idempotent."""
        close = getattr(self.runner, "close", None)
        if close is not None:
            close()

    # -- internals ------------------------------------------------------------------------------
    def _start_pending(self) -> None:
        while self.pending and len(self.running) < self.max_running:
            self._launch(self.pending.popleft())

    def _launch(self, job: EvalJob) -> None:
        job.attempt += 1
        job.out_dir.parent.mkdir(parents=True, exist_ok=True)
        job.log_path = job.out_dir.parent / f"{job.out_dir.name}.attempt{job.attempt}.log"
        job.handle = self.runner.start(job)
        job.started = self.clock()
        self.running.append(job)

    def _reap(self) -> None:
        still = []
        for job in self.running:
            code = self.runner.poll(job)
            self._note_runner_retry(job)
            if code is None and self.clock() - job.started > self.timeout_s:
                self.runner.kill(job)
                self._finish(job, f"timed out after {self.timeout_s:.0f}s", self.runner.poll(job))
            elif code is None:
                still.append(job)
            elif code == 0 and self.is_complete(job.out_dir):
                self._events.append(EvalEvent("ok", job, exit_code=0))
            else:
                self.runner.kill(job)  # leftovers of a crashed job (e.g. vLLM workers) must not linger
                reason = f"exit code {code}" if code != 0 else "exit 0 without results"
                if code is not None and code < 0:
                    reason = f"killed by signal {-code}"
                self._finish(job, reason, code)
        self.running = still

    def _note_runner_retry(self, job: EvalJob) -> None:
        """A runner that retries a job itself -- the persistent evaluator whose engine died or hung hands
        the job to a fresh process (``handle.fallback``) -- is reported once as a ``failed`` event with
        the runner's log tail, so the fault is recorded like any failed attempt; the retry's result (or
        failure) follows as usual."""
        reason = getattr(job.handle, "fallback", None)
        if reason and reason != job.runner_retry:
            job.runner_retry = reason
            tail = _tail(getattr(job.handle, "fault_log", None))
            self._events.append(EvalEvent("failed", job, f"{reason}; retried in a fresh evaluator process",
                                          None, tail))

    def _finish(self, job: EvalJob, reason: str, code: int | None) -> None:
        tail = _tail(job.log_path)
        if job.attempt <= self.retries and code != INPUT_ERROR_EXIT:  # bad input stays bad: no retry
            self._events.append(EvalEvent("failed", job, reason, code, tail))
            self.pending.appendleft(job)  # retry first: it is the oldest checkpoint
        else:
            self._events.append(EvalEvent("gave_up", job, reason, code, tail))
