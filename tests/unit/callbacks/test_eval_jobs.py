"""The evaluation queue with real processes: success, crash + retry, kill -9, timeout, back-pressure."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from ifdistill.callbacks.eval_jobs import EvalJob, EvalQueue

# A stand-in evaluator: behaviour chosen per attempt by a counter file next to its output.
FAKE = r"""
import os, sys, time, pathlib
out = pathlib.Path(sys.argv[1]); mode = sys.argv[2]
count = out.parent / (out.name + ".count")
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
print(f"attempt {n} mode {mode}", flush=True)
if mode == "crash_once" and n == 1:
    print("boom: simulated crash", file=sys.stderr); sys.exit(3)
if mode == "hang":
    time.sleep(600)
if mode == "slow":
    time.sleep(float(os.environ.get("FAKE_SLEEP", "2")))
if mode == "no_results":
    sys.exit(0)
if mode == "bad_input":
    print("ifdistill-eval: error: model.safetensors: tensor w holds 1 non-finite values", file=sys.stderr); sys.exit(2)
out.mkdir(parents=True, exist_ok=True)
(out / "results.json").write_text('{"ok": true}')
"""


def _job(tmp_path: Path, step: int, mode: str, **env) -> EvalJob:
    script = tmp_path / "fake_eval.py"
    script.write_text(FAKE)
    out = tmp_path / "evals" / f"step_{step:06d}"
    return EvalJob(step=step, export_dir=tmp_path, out_dir=out, argv=[sys.executable, str(script), str(out), mode],
                   env={**os.environ, **env})


def _kinds(events):
    return [(e.kind, e.job.step) for e in events]


def test_success_is_reported_once(tmp_path):
    q = EvalQueue(poll_interval_s=0.05)
    q.submit(_job(tmp_path, 10, "ok"))
    events = q.drain(30)
    assert _kinds(events) == [("ok", 10)] and not q.busy()
    assert q.poll() == []


def test_drain_hands_each_result_over_as_it_comes(tmp_path):
    """While it waits, each finished job is handed over at once (the caller records it), not when the last
    one is done: a process killed in the wait keeps every result it was given."""
    q = EvalQueue(poll_interval_s=0.05)
    q.submit(_job(tmp_path, 10, "ok"))
    q.submit(_job(tmp_path, 20, "slow", FAKE_SLEEP="1"))
    seen = []
    events = q.drain(30, each=lambda new: seen.append((_kinds(new), (tmp_path / "evals" / "step_000020").exists())))
    assert seen == [([("ok", 10)], False), ([("ok", 20)], True)] and _kinds(events) == [("ok", 10), ("ok", 20)]


def test_crash_is_recorded_then_retried(tmp_path):
    q = EvalQueue(retries=1, poll_interval_s=0.05)
    q.submit(_job(tmp_path, 20, "crash_once"))
    events = q.drain(30)
    assert _kinds(events) == [("failed", 20), ("ok", 20)]
    assert events[0].exit_code == 3 and "simulated crash" in events[0].log_tail


def test_gives_up_after_retries(tmp_path):
    q = EvalQueue(retries=1, poll_interval_s=0.05)
    q.submit(_job(tmp_path, 30, "no_results"))
    events = q.drain(30)
    assert _kinds(events) == [("failed", 30), ("gave_up", 30)]
    assert events[-1].reason == "exit 0 without results"


def test_an_input_error_is_not_retried(tmp_path):
    """Exit code 2 is ifdistill-eval's bad input (a corrupt or non-finite export): the same again on retry."""
    q = EvalQueue(retries=1, poll_interval_s=0.05)
    q.submit(_job(tmp_path, 40, "bad_input"))
    events = q.drain(30)
    assert _kinds(events) == [("gave_up", 40)]
    assert events[0].exit_code == 2 and "non-finite" in events[0].log_tail
    assert (tmp_path / "evals" / "step_000040.count").read_text() == "1"  # one attempt ran


def test_kill_9_mid_run_is_a_failure_and_the_retry_succeeds(tmp_path):
    q = EvalQueue(retries=1, poll_interval_s=0.05)
    job = _job(tmp_path, 40, "slow", FAKE_SLEEP="3")
    q.submit(job)
    time.sleep(0.5)
    os.kill(job.handle.pid, signal.SIGKILL)
    count = tmp_path / "evals" / "step_000040.count"
    count.write_text("1")  # the second attempt is 'slow' too but finishes
    events = q.drain(30)
    assert _kinds(events) == [("failed", 40), ("ok", 40)]
    assert events[0].reason == "killed by signal 9"


def test_an_evaluator_killed_9_under_its_supervisor_reads_as_signal_9(tmp_path):
    """The supervisor passes the evaluator's death on: SIGKILL of the evaluator (not of the supervisor)
    is reported as "killed by signal 9", as a SIGKILL of an unsupervised process would be."""
    q = EvalQueue(retries=0, poll_interval_s=0.05)
    job = _job(tmp_path, 45, "hang")
    q.submit(job)
    children = Path(f"/proc/{job.handle.pid}/task/{job.handle.pid}/children")
    deadline = time.monotonic() + 20
    while not children.read_text().split() and time.monotonic() < deadline:
        time.sleep(0.05)
    (evaluator,) = map(int, children.read_text().split())
    os.kill(evaluator, signal.SIGKILL)
    events = q.drain(30)
    assert _kinds(events) == [("gave_up", 45)] and events[0].reason == "killed by signal 9", events[0].reason


def test_hang_times_out_and_kills_the_process_group(tmp_path):
    q = EvalQueue(retries=0, timeout_s=1.0, poll_interval_s=0.05)
    job = _job(tmp_path, 50, "hang")
    q.submit(job)
    events = q.drain(30)
    assert _kinds(events) == [("gave_up", 50)] and "timed out" in events[0].reason
    with pytest.raises(ProcessLookupError):
        os.killpg(job.handle.pid, 0)


@pytest.mark.parametrize("policy,expected", [
    ("skip_new", [("skipped", 3), ("ok", 1), ("ok", 2)]),
    ("drop_oldest", [("skipped", 2), ("ok", 1), ("ok", 3)]),
    ("wait", [("ok", 1), ("ok", 2), ("ok", 3)]),
])
def test_back_pressure_policies_never_lose_a_checkpoint_silently(tmp_path, policy, expected):
    q = EvalQueue(max_running=1, max_pending=1, policy=policy, poll_interval_s=0.05)
    events = []
    for step in (1, 2, 3):
        events += q.submit(_job(tmp_path, step, "slow", FAKE_SLEEP="0.5"))
    events += q.drain(30)
    assert sorted(_kinds(events), key=lambda e: (e[0] != "skipped", e[1])) == expected


TRAINER = r"""
import sys, time
from pathlib import Path
from ifdistill.callbacks.eval_jobs import EvalJob, EvalQueue
d = Path(sys.argv[1])
evaluator = ("import os, subprocess, sys, time; d = sys.argv[1]; "
             "kid = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
             "open(d + '/pids', 'w').write(f'{os.getpid()} {kid.pid}'); time.sleep(300)")
queue = EvalQueue(timeout_s=600)
queue.submit(EvalJob(1, d, d / "out", [sys.executable, "-c", evaluator, str(d)], {}))
print("evaluating", flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead, only not reaped yet
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's")
def test_evaluations_die_with_a_trainer_killed_9(tmp_path):
    """kill -9 of the trainer (a real process with a real queue) while an evaluation runs: the evaluator
    and the process it started (vLLM's engine stands for it) are gone within seconds, no orphan left."""
    import subprocess

    root = Path(__file__).resolve().parents[3]
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(root)})
    assert trainer.stdout.readline().strip() == "evaluating"
    deadline = time.monotonic() + 60
    while not (tmp_path / "pids").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    evaluator, grandchild = map(int, (tmp_path / "pids").read_text().split())
    assert _alive(evaluator) and _alive(grandchild)
    trainer.kill()
    trainer.wait()
    t0 = time.monotonic()
    while (_alive(evaluator) or _alive(grandchild)) and time.monotonic() - t0 < 15:
        time.sleep(0.05)
    gone_after = time.monotonic() - t0
    assert not _alive(evaluator) and not _alive(grandchild), "an evaluator outlived its trainer"
    assert gone_after < 10, gone_after  # SIGTERM at once, SIGKILL after a 5 s grace at most


def test_an_arriving_evaluation_is_one_line_with_standard_errors():
    from ifdistill.callbacks.eval_logging import evaluation_line

    results = {"metrics": {"prompt_level_strict_acc": 0.4125, "prompt_level_strict_acc_stderr": 0.0212,
                           "inst_level_strict_acc": 0.5, "inst_level_strict_acc_stderr": 0.0101,
                           "prompt_level_loose_acc": 0.45, "prompt_level_loose_acc_stderr": 0.02,
                           "inst_level_loose_acc": 0.55, "inst_level_loose_acc_stderr": 0.011}}
    assert evaluation_line(20, results) == (
        "[checkpoint-eval] step 20: prompt strict 0.4125±0.0212 | inst strict 0.5000±0.0101 | "
        "prompt loose 0.4500±0.0200 | inst loose 0.5500±0.0110")


def test_the_checkpoint_eval_section_names_one_runner():
    """``callbacks.checkpoint_eval``'s runner / engine / persistent fields, read the same way by the callback
    and by back-fill: persistent is one server on this node with the section's settings (a back-fill
    option overrides one), process is the section's runner, anything else is refused."""
    from ifdistill.launchers.local_eval import LocalRunner
    from ifdistill.launchers.persistent_eval import PersistentRunner
    from ifdistill.launchers.runners import checkpoint_eval_runner

    server = checkpoint_eval_runner(None, "persistent", {"request_timeout_s": 7, "max_server_starts": 2},
                                    max_server_starts=1)
    assert isinstance(server, PersistentRunner)
    assert (server.request_timeout_s, server.max_server_starts) == (7, 1)
    assert isinstance(checkpoint_eval_runner(None, "process"), LocalRunner)
    with pytest.raises(ValueError, match="does not combine with a runner"):
        checkpoint_eval_runner("slurm", "persistent")
    with pytest.raises(ValueError, match="engine must be process or persistent"):
        checkpoint_eval_runner(None, "thread")
