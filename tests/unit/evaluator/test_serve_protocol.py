"""The persistent evaluator's protocol without an engine: command lines, results.json's runtime record,
and a real ``ifdistill-eval serve`` process answering an input error as a fresh process would (exit 2),
staying up, and stopping on close() with nothing left behind (no process, no spool folder)."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from ifdistill.benchmarks.instruction_following.schema import RESULTS_SCHEMA, SchemaError, validate
from ifdistill.callbacks.eval_jobs import EvalJob
from ifdistill.evaluator.launch import evaluator_command
from ifdistill.evaluator.results import FALLBACK_ENV, process_runtime
from ifdistill.evaluator.serve import job_overrides, servable
from ifdistill.launchers.persistent_eval import PersistentRunner
from tests.support import descendants, left_behind


def _eval_section():
    from tests.support import eval_section

    return eval_section(["eval=synthetic", "eval.runtime.progress=false"], "/tmp/unused")


def test_job_argv_becomes_the_same_overrides(tmp_path):
    argv, _ = evaluator_command(_eval_section(), tmp_path / "export dir", tmp_path / "out", base_env={})
    overrides = job_overrides(argv)
    request = tmp_path / "out" / ".request"
    assert overrides[0] == f"hydra.searchpath=['file://{request}']"
    assert overrides[1:] == argv[4:]  # everything after --config-dir, unchanged (quoting included)
    assert servable(argv) and not servable(["bash", "-c", "true"])
    assert not servable([sys.executable, "-m", "ifdistill.evaluator.cli", "backfill", "run_dir=x"])
    with pytest.raises(ValueError, match="unsupported"):
        job_overrides([sys.executable, "-m", "ifdistill.evaluator.cli", "--multirun", "a=1"])


def test_runtime_record_and_schema(monkeypatch):
    monkeypatch.delenv(FALLBACK_ENV, raising=False)
    assert process_runtime() == {"engine": "process"}
    monkeypatch.setenv(FALLBACK_ENV, "the server exited with code -9")
    assert process_runtime() == {"engine": "process", "fallback": "the server exited with code -9"}
    schema = RESULTS_SCHEMA["properties"]["runtime"]
    validate({"engine": "persistent", "checkpoint_index": 2}, schema)
    with pytest.raises(SchemaError):
        validate({"engine": "thread"}, schema)
    assert "runtime" not in RESULTS_SCHEMA["required"]  # results written before the field still validate


def test_input_error_is_exit_2_and_the_server_stays(tmp_path):
    out = tmp_path / "run" / "evals" / "step_000010"
    argv, env = evaluator_command(_eval_section(), tmp_path / "no-such-export", out)
    job = EvalJob(10, tmp_path / "no-such-export", out, argv, env, attempt=1,
                  log_path=out.parent / "step_000010.attempt1.log")
    out.parent.mkdir(parents=True, exist_ok=True)
    before = descendants(os.getpid())
    runner = PersistentRunner(request_timeout_s=120)
    try:
        job.handle = runner.start(job)
        deadline = time.monotonic() + 120
        while (code := runner.poll(job)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert code == 2, job.log_path.read_text()
        assert "does not exist" in job.log_path.read_text()
        runner.kill(job)  # what the queue does after a failure: a finished request leaves the server alone
        assert runner.server is not None and runner.server.proc.poll() is None and runner.events == []
        reply = json.loads(next((runner.server.spool / "replies").glob("*.json")).read_text())
        assert reply["status"] == "input_error" and reply["exit_code"] == 2
        server = runner.server
    finally:
        runner.close()
    assert server.proc.poll() == 0  # it stopped on request, not by a signal
    assert not server.spool.exists() and not list(out.parent.glob(".eval-server-*"))  # its spool removed
    runner.close()  # idempotent
    assert left_behind(before) == []



def test_a_dead_engine_process_stops_the_heartbeat_and_is_named(tmp_path):
    """The server's heartbeat thread watches its engine's processes: a killed one (a zombie until reaped)
    is written to ``engine_dead`` and the heartbeat stops, so the client falls back at once."""
    import signal
    import subprocess
    import threading

    from ifdistill.evaluator.serve import ENGINE_DEAD, HEARTBEAT, ServedEngine, _beat, child_processes, init_spool

    spool = init_spool(tmp_path / "spool")
    engine = ServedEngine()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert proc.pid in child_processes(os.getpid())
        engine.processes = frozenset({proc.pid})
        stop = threading.Event()
        beat = threading.Thread(target=_beat, args=(spool, stop, engine), daemon=True)
        beat.start()
        time.sleep(0.3)
        assert (spool / HEARTBEAT).is_file() and not (spool / ENGINE_DEAD).exists() and beat.is_alive()
        os.kill(proc.pid, signal.SIGKILL)  # not reaped: a zombie, which counts as dead
        beat.join(timeout=5)
        assert not beat.is_alive()
        assert json.loads((spool / ENGINE_DEAD).read_text())["pids"] == [proc.pid]
        stop.set()
    finally:
        proc.kill()
        proc.wait()
    engine.processes = frozenset({proc.pid})
    engine.close()  # closing on purpose forgets its processes first: no false alarm
    assert engine.dead_processes() == []


def test_a_request_failing_on_a_dead_engine_is_put_down_to_the_death(tmp_path, monkeypatch):
    """vLLM raises in the request (EngineDeadError) as soon as its engine process dies, before the
    heartbeat thread's next look: the server records the death before it replies, and the client gives
    the death as the reason, not the exception it led to."""
    import subprocess
    from types import SimpleNamespace

    from ifdistill.evaluator import serve as served

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: no such process any more

    def request_on_a_dead_engine(engine, argv):
        engine.processes = frozenset({gone.pid})
        raise RuntimeError("EngineCore encountered an issue. See stack trace (above) for the root cause.")

    monkeypatch.setattr(served, "handle", request_on_a_dead_engine)
    spool = served.init_spool(tmp_path / "spool")
    served.submit(spool, "r1", ["ifdistill-eval"])
    assert served.serve(spool, poll_s=0.01) == 1  # a failed request ends the server
    reply = served.read_reply(spool, "r1")
    assert reply["status"] == "error" and "EngineCore" in reply["error"]
    assert json.loads((spool / served.ENGINE_DEAD).read_text())["pids"] == [gone.pid]
    reason = PersistentRunner()._fault(SimpleNamespace(server=SimpleNamespace(spool=spool)), reply)
    assert reason.startswith("the server's engine process(es) died: ") and str(gone.pid) in reason
