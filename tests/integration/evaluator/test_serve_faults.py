"""Faults of the persistent evaluator end with every checkpoint scored and no process left behind.

Three full-weight exports go through the checkpoint queue with :class:`PersistentRunner`; while the
second is being evaluated by the server (its request taken, no reply yet; at this size the evaluation
is mostly preparing and loading the weights, generation takes under a second):

- killed: the server process is SIGKILLed (an OOM kill, a crash) -- vLLM's engine processes are
  orphaned; the runner sees the death, kills the server's process group and evaluates the checkpoint
  in a fresh ``ifdistill-eval`` process; the third checkpoint starts a new server;
- hung: the server's engine processes are SIGSTOPped -- the server itself stays alive and keeps its
  heartbeat, its request never returns; past ``request_timeout_s`` the runner kills it and falls back.

The fallback is recorded (runner event, handle, results.json ``runtime.fallback``), its result equals
the one a fresh process gives (byte-identical samples.jsonl with the undisturbed run of the same export),
and after :meth:`PersistentRunner.close` no process of the test remains.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from ifdistill.callbacks.eval_jobs import EvalQueue
from ifdistill.evaluator.output import read_results
from ifdistill.evaluator.serve import PID, REPLIES, REQUESTS
from ifdistill.launchers.persistent_eval import PersistentRunner
from tests.integration.evaluator.serve_support import jobs, make_exports
from tests.support import descendants, left_behind, session_members
from tests.integration.evaluator.tuned import require_vllm

pytestmark = pytest.mark.slow


def _taken(job) -> bool:
    """The server has taken the job's request (the request file is gone) and not replied yet."""
    h = job.handle
    if h is None or h.engine != "persistent":
        return False
    return not (h.server.spool / REQUESTS / f"{h.request_id}.json").exists() and \
        not (h.server.spool / REPLIES / f"{h.request_id}.json").exists()


def run_with_fault(js, runner: PersistentRunner, fault, sessions: set) -> tuple[list, bool]:
    """Run ``js`` through a queue; call ``fault(server_pid)`` once the server is evaluating the second
    job. Returns the events and whether that evaluation was still in progress when the fault came;
    ``sessions`` collects the session of every server and process started (their leaders' pids)."""
    queue = EvalQueue(runner=runner, max_pending=8, retries=0, poll_interval_s=0.2)
    events, hit = [], None
    for job in js:
        events += queue.submit(job)
    deadline = time.monotonic() + 900
    while queue.busy() and time.monotonic() < deadline:
        events += queue.poll()
        sessions.update((j.handle.server.proc if j.handle.server else j.handle.proc).pid for j in js if j.handle)
        if hit is None and _taken(js[1]):
            time.sleep(0.2)  # into the evaluation (composing, hashing, loading the weights, generating)
            hit = _taken(js[1])
            fault(int((js[1].handle.server.spool / PID).read_text()))
        time.sleep(0.1)
    return events, bool(hit)


@pytest.fixture(scope="module")
def exports(tuned, tiny_model_dir, tmp_path_factory):
    require_vllm()
    return make_exports(tuned, tiny_model_dir, tmp_path_factory.mktemp("faults"), "full")


@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_fault_falls_back_and_leaves_no_process(fault, exports, tuned, tmp_path):
    js = jobs(tuned, exports, tmp_path / "run", devices={"cpu_threads_bind": "0"})
    runner = PersistentRunner(request_timeout_s=30, heartbeat_timeout_s=60)

    def kill(pid: int) -> None:
        os.kill(pid, signal.SIGKILL)

    def hang(pid: int) -> None:
        for child in descendants(pid):  # the engine core and worker: the server waits on them forever
            os.kill(child, signal.SIGSTOP)

    before, started, sessions = descendants(os.getpid()), time.perf_counter(), set()
    try:
        events, hit = run_with_fault(js, runner, kill if fault == "killed" else hang, sessions)
    finally:
        runner.close()
    print(f"\n{fault}: {time.perf_counter() - started:.0f} s")
    assert hit, "the fault came after step 20's reply: nothing was in progress"
    assert sorted((e.kind, e.job.step) for e in events) == [("ok", 10), ("ok", 20), ("ok", 30)], \
        [(e.kind, e.job.step, e.reason, e.log_tail[-2000:]) for e in events]
    # Nothing left: no process below the test that was not there before it, and nothing in the sessions of
    # the servers and fallback processes (a SIGKILLed server's engine processes are orphans, no longer
    # anyone's descendants).
    assert len(sessions) == 3 and left_behind(before) == []
    assert [pid for sid in sessions for pid in session_members(sid)] == []
    (event,) = runner.events
    assert event["step"] == 20
    assert ("exited with code" in event["reason"]) if fault == "killed" else ("no reply" in event["reason"])
    assert runner.server_starts == 2  # the third checkpoint went to a new server
    runtimes = [read_results(j.out_dir)[0]["runtime"] for j in js]
    assert [r["engine"] for r in runtimes] == ["persistent", "process", "persistent"]
    assert runtimes[1]["fallback"] == event["reason"].splitlines()[0][:300]
    assert js[1].handle.fallback == event["reason"]
