"""Faults of the persistent evaluator end with every checkpoint scored, the fault recorded, and no process left.

Full-weight exports go through the checkpoint callback's path (:class:`CheckpointEvaluations`: the
queue, :class:`PersistentRunner`, metrics.json) while the caller keeps polling as training does between
steps; while the second is being evaluated by the server (its request taken, no reply yet; at this size
the evaluation is mostly preparing and loading the weights, generation takes under a second):

- killed: the server process, which holds the engine, is SIGKILLed (an OOM kill, a crash) -- vLLM's
  engine processes are orphaned; the runner sees the death, kills the server's process group and
  evaluates the checkpoint in a fresh ``ifdistill-eval`` process (a fresh engine); a third checkpoint
  starts a new server (this case only: the other two stop after the retried checkpoint, which is what
  they add, and save a server start each);
- engine killed: the server's engine processes (vLLM's engine core) are SIGKILLed -- the server lives,
  its request would wait forever; its heartbeat thread sees the engine gone and says so (``engine_dead``),
  and the runner falls back at once instead of after ``request_timeout_s``;
- hung: the server's engine processes are SIGSTOPped -- the server itself stays alive and keeps its
  heartbeat, its request never returns; past ``request_timeout_s`` the runner kills it and falls back.

The fault is recorded (metrics.json: a failure of step 20 with the reason, resolved by the retry's result;
runner event, handle, results.json ``runtime.fallback``); no poll blocks the caller for long (training
goes on); the retried result is byte-identical (samples.jsonl) to a fresh ``ifdistill-eval`` process's
evaluation of the same export; and after :meth:`PersistentRunner.close` no process of the test remains.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from ifdistill.callbacks.eval_jobs import EvalQueue
from ifdistill.callbacks.evaluations import CheckpointEvaluations
from ifdistill.evaluator.output import read_results
from ifdistill.evaluator.serve import PID, REPLIES, REQUESTS
from ifdistill.launchers.persistent_eval import PersistentRunner
from ifdistill.results import run_metrics
from ifdistill.runs.rundir import RunDir
from tests.integration.evaluator.serve_support import eval_cfg, make_exports
from tests.support import descendants, left_behind, session_members
from tests.integration.evaluator.tuned import require_vllm

pytestmark = pytest.mark.slow

DEVICES = {"cpu_threads_bind": "0"}
# The engine in processes of its own (GPU's default; on CPU the engine runs inside the server by default):
# the layout in which the engine can die or hang apart from the server.
SEPARATE_ENGINE = "eval.runtime.engine_in_process=false"


def _taken(job) -> bool:
    """The server has taken the job's request (the request file is gone) and not replied yet."""
    h = job.handle if job is not None else None
    if h is None or h.engine != "persistent":
        return False
    return not (h.server.spool / REQUESTS / f"{h.request_id}.json").exists() and \
        not (h.server.spool / REPLIES / f"{h.request_id}.json").exists()


def run_with_fault(evaluations: CheckpointEvaluations, exports, fault, sessions: set) -> tuple[list, bool, float]:
    """Submit ``exports`` and poll as training does between steps, landing every event in metrics.json;
    call ``fault(server_pid)`` once the server is evaluating the second export. Returns the events,
    whether that evaluation was still in progress when the fault came, and the longest poll (seconds);
    ``sessions`` collects the session of every server and process started (their leaders' pids)."""
    queue, events, hit, longest, seen = evaluations.queue, [], None, 0.0, {}
    for step, export in enumerate(exports, start=1):
        events += evaluations.submit(step * 10, export)
    deadline = time.monotonic() + 900
    while queue.busy() and time.monotonic() < deadline:
        t0 = time.perf_counter()
        new = queue.poll()
        longest = max(longest, time.perf_counter() - t0)
        evaluations.land(new, [])
        events += new
        seen.update({(j.step, j.attempt): j for j in queue.running})
        sessions.update((j.handle.server.proc if j.handle.server else j.handle.proc).pid
                        for j in seen.values() if j.handle)
        second = next((j for j in queue.running if j.step == 20), None)
        if hit is None and _taken(second):
            time.sleep(0.2)  # into the evaluation (composing, hashing, loading the weights, generating)
            hit = _taken(second)
            fault(int((second.handle.server.spool / PID).read_text()))
        time.sleep(0.1)
    return events, bool(hit), longest


@pytest.fixture(scope="module")
def exports(tuned, tiny_model_dir, tmp_path_factory):
    require_vllm()
    return make_exports(tuned, tiny_model_dir, tmp_path_factory.mktemp("faults"), "full")


@pytest.fixture(scope="module")
def fresh_second(exports, tuned, tmp_path_factory):
    """samples.jsonl of the second export evaluated by a fresh ``ifdistill-eval`` process, as the callback
    builds its command (no server involved), with the engine in that process (CPU's default): the retried
    evaluations (an engine process of its own) must equal it, so the engine's layout is shown not to
    change a sample."""
    root = tmp_path_factory.mktemp("fresh")
    evaluations = CheckpointEvaluations(RunDir(root), {None: eval_cfg(tuned, root)}, queue=EvalQueue(),
                                        source="callback", devices=DEVICES)
    out = RunDir(root).eval_dir(20)
    argv, env = evaluations.command(evaluations.evals[None], exports[1], out)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return (out / "samples.jsonl").read_bytes()


@pytest.mark.parametrize("fault", ["killed", "engine_killed", "hung"])
def test_fault_is_recorded_retried_on_a_fresh_engine_and_leaves_no_process(fault, exports, fresh_second, tuned,
                                                                           tmp_path):
    exports = exports if fault == "killed" else exports[:2]
    steps = [10 * (i + 1) for i in range(len(exports))]
    run = RunDir(tmp_path / "run")
    runner = PersistentRunner(request_timeout_s=30, heartbeat_timeout_s=60)
    queue = EvalQueue(runner=runner, max_pending=8, retries=0, poll_interval_s=0.2)
    evaluations = CheckpointEvaluations(run, {None: eval_cfg(tuned, run.root, SEPARATE_ENGINE)}, queue=queue,
                                        source="callback", devices=DEVICES)

    def kill(pid: int) -> None:
        os.kill(pid, signal.SIGKILL)

    def kill_engine(pid: int) -> None:
        for child in descendants(pid):  # the engine core and worker; the server lives on
            os.kill(child, signal.SIGKILL)

    def hang(pid: int) -> None:
        for child in descendants(pid):  # the engine core and worker: the server waits on them forever
            os.kill(child, signal.SIGSTOP)

    before, started, sessions = descendants(os.getpid()), time.perf_counter(), set()
    try:
        events, hit, longest = run_with_fault(evaluations, exports, {"killed": kill, "engine_killed": kill_engine,
                                                                     "hung": hang}[fault], sessions)
    finally:
        runner.close()
    print(f"\n{fault}: {time.perf_counter() - started:.0f} s, longest poll {longest:.1f} s")
    assert hit, "the fault came after step 20's reply: nothing was in progress"
    assert sorted((e.kind, e.job.step) for e in events) == sorted([("failed", 20)] + [("ok", s) for s in steps]), \
        [(e.kind, e.job.step, e.reason, e.log_tail[-2000:]) for e in events]
    # Nothing left: no process below the test that was not there before it, and nothing in the sessions of
    # the servers and fallback processes (a SIGKILLed server's engine processes are orphans, no longer
    # anyone's descendants).
    assert len(sessions) == len(steps) and left_behind(before) == []
    assert [pid for sid in sessions for pid in session_members(sid)] == []
    (event,) = runner.events
    assert event["step"] == 20
    print(f"{fault}: {event['reason'].splitlines()[0]}")
    expected = {"killed": "exited with code", "engine_killed": "engine process(es) died", "hung": "no reply"}[fault]
    assert expected in event["reason"], event["reason"]
    assert runner.server_starts == len(steps) - 1  # a third checkpoint went to a new server
    # recorded: metrics.json holds the fault of step 20 with its reason and the server's log, then its result
    metrics = run_metrics.read(run.root)
    assert sorted(metrics["checkpoints"]) == [str(s) for s in steps]
    (failure,) = metrics["failures"]
    assert failure["step"] == 20 and failure["reason"].startswith(f"failed: {event['reason'].splitlines()[0]}")
    assert "retried in a fresh evaluator process" in failure["reason"] and failure["stderr_tail"]
    assert [f["resolved"] for f in run_metrics.failure_history(metrics)] == [True]
    runtimes = [read_results(run.eval_dir(s))[0]["runtime"] for s in steps]
    assert [r["engine"] for r in runtimes] == ["persistent", "process", "persistent"][:len(steps)]
    assert runtimes[1]["fallback"] == event["reason"].splitlines()[0][:300]
    # the retried evaluation is the one a fresh process gives, byte for byte
    assert (run.eval_dir(20) / "samples.jsonl").read_bytes() == fresh_second
    # the poll never held the caller (training) for long: the fault is handled by killing the server's
    # group (SIGTERM, 5 s grace, SIGKILL) and starting the fresh process, not by waiting for the retry
    assert longest < 20, longest
