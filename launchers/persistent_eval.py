"""Run checkpoint evaluations on one long-lived evaluator (``ifdistill-eval serve``) instead of a process each.

A runner for :class:`ifdistill.callbacks.eval_jobs.EvalQueue` (``start(job) -> handle``, ``poll(job)``,
``kill(job)``) with the per-process runner's contract: ``poll`` returns None while the job runs, then an
exit code that is 0 only when the job's ``results.json`` is complete, and 2 for an input error (the
evaluator's own code). The evaluation itself is the job's ``ifdistill-eval`` command line, sent to the
server (:mod:`ifdistill.evaluator.serve`), which composes and runs it through the same code path.

The server is started lazily by the first job, under the same supervision as a per-checkpoint process
(:func:`~ifdistill.launchers.local_eval.die_with_parent`: its own session, SIGTERM when the trainer dies,
its whole process group killed by :func:`~ifdistill.launchers.local_eval.kill_group`), with that job's
environment. Each server gets a fresh spool directory next to the run's evaluations
(``evals/.eval-server-<n>/``: requests, replies, heartbeat and ``server.log``).

Faults. A job whose server dies (its process exits), loses its engine (a process of the engine died:
the server writes ``engine_dead``), freezes (no heartbeat for ``heartbeat_timeout_s``),
does not get its engine up within ``start_timeout_s``, hangs (no reply ``request_timeout_s`` after the
request was sent or the engine came up, whichever is later: the start-up has its own timeout) or
replies with an internal error:
the server's process group is killed and the job is run again, at once, in a fresh per-checkpoint process
from the job's own argv (its environment gets ``IFDISTILL_EVAL_FALLBACK=<reason>``, which results.json
records as ``runtime.fallback``). The event is printed, appended to :attr:`PersistentRunner.events` and
kept on the job's handle (``job.handle.fallback``); the queue reports it as a ``failed`` attempt, so
``metrics.json`` records the fault with the server log's tail, resolved by the retry's result. The
*next* checkpoint starts a new server; after
``max_server_starts`` servers every later checkpoint runs in its own process. An input error (bad export,
bad config) is not a server fault: it is reported as exit code 2, as a fresh process would, and the
server keeps running. Keep ``request_timeout_s`` well below the queue's ``timeout_s``: the queue's clock
runs from the first start, fallback included.

:meth:`PersistentRunner.close` stops the server (a ``stop`` request, then the process group is killed
after ``stop_timeout_s``); it is idempotent and also registered to run at interpreter exit. The trainer
calls it at the end of training, on preemption and on a crash. A server that stopped on request (exit 0)
has its spool removed; the spool of a server that failed stays, with the ``server.log`` its fault names.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

from ifdistill.evaluator.output import RESULTS_FILE
from ifdistill.evaluator.results import FALLBACK_ENV
from ifdistill.launchers.local_eval import LocalRunner, die_with_parent, kill_group
from ifdistill.evaluator.serve import (ENGINE_DEAD, HEARTBEAT, READY, STOP, init_spool, read_reply, servable,
                                       submit, touched_at)


@dataclasses.dataclass
class Server:
    proc: subprocess.Popen
    spool: Path
    started: float  # wall clock (compared with the server's file times)


@dataclasses.dataclass
class PersistentHandle:
    """``job.handle``: where the job runs (``engine``: persistent | process) and why it fell back."""

    engine: str
    server: Optional[Server] = None
    request_id: Optional[str] = None
    submitted: float = 0.0  # wall clock
    proc: Optional[subprocess.Popen] = None  # the per-checkpoint process (engine "process")
    fallback: Optional[str] = None
    fault_log: Optional[Path] = None  # the failed server's log (its tail goes into metrics.json's failure)
    killed: bool = False


class PersistentRunner:
    """One ``ifdistill-eval serve`` for the run, a fresh process per checkpoint when it fails (module docstring)."""

    def __init__(self, *, request_timeout_s: float = 1800.0, start_timeout_s: float = 900.0,
                 heartbeat_timeout_s: float = 120.0, max_server_starts: int = 3, stop_timeout_s: float = 30.0):
        self.request_timeout_s, self.heartbeat_timeout_s = request_timeout_s, heartbeat_timeout_s
        self.start_timeout_s = start_timeout_s
        self.max_server_starts, self.stop_timeout_s = max_server_starts, stop_timeout_s
        self.server: Optional[Server] = None
        self.server_starts = 0
        self.events: list[dict[str, Any]] = []  # every fallback: step, reason, time, server log
        self._requests = 0
        atexit.register(self.close)

    # -- the queue's runner interface --------------------------------------------------------------
    def start(self, job: Any) -> PersistentHandle:
        if not servable(job.argv):
            return self._process(job, None)
        if self.server is None or self.server.proc.poll() is not None:
            if self.server_starts >= self.max_server_starts:
                return self._process(job, None)
            self._start_server(job)
        self._requests += 1
        request_id = f"{self._requests:06d}-step{job.step}"
        submit(self.server.spool, request_id, job.argv)
        with open(job.log_path, "ab") as log:
            log.write(f"[persistent-eval] request {request_id} sent to the evaluator server "
                      f"(pid {self.server.proc.pid}); its log: {self.server.spool / 'server.log'}\n".encode())
        return PersistentHandle("persistent", server=self.server, request_id=request_id, submitted=time.time())

    def poll(self, job: Any) -> Optional[int]:
        h: PersistentHandle = job.handle
        if h.engine == "process":
            return h.proc.poll()
        if h.killed:
            return -15
        reply = read_reply(h.server.spool, h.request_id)
        if reply is not None and reply["status"] == "ok" and (job.out_dir / RESULTS_FILE).is_file():
            return 0
        if reply is not None and reply["status"] == "input_error":
            with open(job.log_path, "ab") as log:
                log.write(f"ifdistill-eval: error: {reply['error']}\n".encode())
            return 2
        reason = self._fault(h, reply)
        if reason is None:
            return None
        self._fall_back(job, reason)
        return None

    def kill(self, job: Any) -> None:
        h: PersistentHandle = job.handle
        if h.engine == "process":
            kill_group(h.proc)
        elif not h.killed and read_reply(h.server.spool, h.request_id) is None:
            h.killed = True  # one request cannot be cancelled: the server goes (a later job starts another)
            self._stop(h.server, kill=True)

    def close(self) -> None:
        """Stop the server (idempotent; also run at interpreter exit)."""
        if self.server is not None:
            self._stop(self.server, kill=False)

    # -- internals ----------------------------------------------------------------------------------
    def _fault(self, h: PersistentHandle, reply: Optional[dict[str, Any]]) -> Optional[str]:
        now = time.time()
        engine_dead = h.server.spool / ENGINE_DEAD
        if reply is not None and reply["status"] == "ok":
            return "the server replied ok but results.json is missing"
        if engine_dead.is_file():  # the cause, also when the request failed on it (the server records it first)
            return f"the server's engine process(es) died: {engine_dead.read_text()}"
        if reply is not None:
            return f"the server failed: {reply.get('error', '')[-500:]}"
        code = h.server.proc.poll()
        if code is not None:
            return f"the server exited with code {code}"
        beat = touched_at(h.server.spool, HEARTBEAT) or h.server.started
        if now - beat > self.heartbeat_timeout_s:
            return f"no heartbeat from the server for {now - beat:.0f}s (timeout {self.heartbeat_timeout_s:.0f}s)"
        ready = touched_at(h.server.spool, READY)
        if ready is None:
            if now - h.server.started > self.start_timeout_s:
                return f"the server's engine is not up {now - h.server.started:.0f}s after its start " \
                       f"(timeout {self.start_timeout_s:.0f}s)"
        elif now - max(h.submitted, ready) > self.request_timeout_s:
            return f"no reply {now - max(h.submitted, ready):.0f}s after the request " \
                   f"(timeout {self.request_timeout_s:.0f}s)"
        return None

    def _fall_back(self, job: Any, reason: str) -> None:
        server = job.handle.server
        self._stop(server, kill=True)
        event = {"step": job.step, "reason": reason, "time": time.time(), "server_log": str(server.spool / "server.log")}
        self.events.append(event)
        print(f"[persistent-eval] step {job.step}: {reason}; evaluating it in a fresh ifdistill-eval process "
              f"(server log: {event['server_log']})", flush=True)
        job.handle = self._process(job, reason)
        job.handle.fault_log = server.spool / "server.log"

    def _process(self, job: Any, fallback: Optional[str]) -> PersistentHandle:
        """The job in its own ``ifdistill-eval`` process, exactly as the per-process runner starts it
        (a fallback writes its own log, which the queue then reads; the server's note stays in the first)."""
        env = dict(job.env)
        if fallback:
            env[FALLBACK_ENV] = fallback.splitlines()[0][:300]
            job.log_path = job.log_path.with_name(job.log_path.name.replace(".log", ".fallback.log"))
        proc = LocalRunner().start(dataclasses.replace(job, env=env))
        return PersistentHandle("process", proc=proc, fallback=fallback)

    def _start_server(self, job: Any) -> None:
        self.server_starts += 1
        spool = init_spool(job.out_dir.parent / f".eval-server-{os.getpid()}-{self.server_starts}")
        argv = [job.argv[0], "-m", "ifdistill.evaluator.serve", f"--spool={spool}"]
        with open(spool / "server.log", "ab") as log:
            proc = subprocess.Popen(die_with_parent(argv), env=job.env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.server = Server(proc, spool, time.time())
        print(f"[persistent-eval] evaluator server {self.server_starts} started (pid {proc.pid}, spool {spool})",
              flush=True)

    def _stop(self, server: Server, *, kill: bool) -> None:
        if server.proc.poll() is None and not kill:
            (server.spool / STOP).touch()
            try:
                server.proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                pass
        # Always, even after the server exited: a crashed server leaves vLLM's engine and worker processes
        # orphaned in its process group.
        kill_group(server.proc)
        if not kill and server.proc.poll() == 0:  # stopped on request: its spool holds nothing to keep
            shutil.rmtree(server.spool, ignore_errors=True)
        if self.server is server:
            self.server = None
