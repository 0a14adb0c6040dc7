"""``ifdistill-status``: runs found through a sweep's job dirs, their state, last step and latest evaluation."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ifdistill.results import run_metrics
from ifdistill.cli.status import main, run_status


def _run(root: Path, name: str, launch: dict, steps=(), evals: dict | None = None) -> Path:
    run = root / "runs" / name
    (run / "checkpoints").mkdir(parents=True)
    for s in steps:
        (run / "checkpoints" / f"step={s:06d}.ckpt").write_bytes(b"")
    (run / "run.json").write_text(json.dumps({"run_id": name, "launches": [launch]}))
    for step, acc in (evals or {}).items():
        run_metrics.record_checkpoint(run, step, {"metrics": {"prompt_level_strict_acc": acc}}, "x", "callback")
    return run


def test_states_steps_and_latest_evaluation(tmp_path, capsys):
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    host = os.uname().nodename
    finished = _run(tmp_path, "a", {"pid": dead.pid, "host": host, "finished": "t", "final_step": 30},
                    steps=(20, 30), evals={10: 0.25, 30: 0.5})
    requeued = _run(tmp_path, "b", {"pid": dead.pid, "host": host, "stopped_at_step": 13}, steps=(10, 13))
    crashed = _run(tmp_path, "c", {"pid": dead.pid, "host": host}, steps=(10,))
    running = _run(tmp_path, "d", {"pid": os.getpid(), "host": host})
    states = {r.name: run_status(r) for r in (finished, requeued, crashed, running)}
    assert {k: v["state"] for k, v in states.items()} == {"a": "finished", "b": "requeued", "c": "stopped",
                                                          "d": "running"}
    assert [states[k]["last_step"] for k in "abcd"] == [30, 13, 10, None]
    assert (states["a"]["eval_step"], states["a"]["eval"]["prompt_level_strict_acc"], states["a"]["evaluated"]) == \
        (30, 0.5, 2)
    # A sweep dir reaches its runs through the job dirs' run_dir.txt; each run is listed once.
    sweep = tmp_path / "sweep"
    for i, run in enumerate((finished, requeued, finished)):
        (sweep / f"{i}_job").mkdir(parents=True)
        (sweep / f"{i}_job" / "run_dir.txt").write_text(f"{run}\n")
    assert main([str(sweep)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 4 and "| a | finished | 1 | 30 | 2 | 0 | 0 | 30 | 50.0 |" in table[2] and "| b | requeued |" in table[3]
    assert main([str(tmp_path / "missing")]) == 2


def test_superseded_failures_are_resolved_and_attempts_count_across_launches(tmp_path, capsys):
    """Two launches each stopped by Ctrl-C while step 10 was evaluated: the evaluator died of SIGINT
    (attempt 1 of the launch, retried) and its retry was abandoned (attempt 2 of the launch) -- as the
    callback records them. Four evaluator runs, numbered 1-4; a back-fill result resolves them all."""
    host = os.uname().nodename
    run = _run(tmp_path, "r", {"pid": None, "host": host}, steps=(10,))
    for launch, t0 in enumerate((100.0, 200.0)):
        run_metrics.record_failure(run, 10, 1, "failed: killed by signal 2", -2, "", t0)
        run_metrics.record_failure(run, 10, 2, "training stopped: KeyboardInterrupt()", None, "", t0 + 1)
    run_metrics.record_failure(run, 20, 1, "failed: exit code 1", 1, "", 300.0)
    run_metrics.record_failure(run, 20, 1, "training stopped: KeyboardInterrupt()", None, "", 301.0)  # waiting retry
    run_metrics.record_failure(run, 30, 0, "missing at end of training", None, "", 302.0)
    status = run_status(run)
    assert [(f["step"], f["attempt_no"]) for f in status["failures"]] == [(10, 1), (10, 2), (10, 3), (10, 4),
                                                                          (20, 1), (20, 1), (30, None)]
    run_metrics.record_checkpoint(run, 10, {"metrics": {"prompt_level_strict_acc": 0.5}}, "evals/step_000010",
                                  "backfill")
    status = run_status(run)
    assert status["resolved_failures"] == 4 and [f["step"] for f in status["failures"]] == [20, 20, 30]
    assert main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "| r | stopped | 1 | 10 | 1 | 3 | 4 | 10 | 50.0 |" in out
    assert "- r step 20 (attempt 1): failed: exit code 1" in out and "step 10 (" not in out
    assert "- r step 30 (no evaluator run): missing at end of training" in out


def test_an_extra_benchmark_has_its_own_counts_latest_scores_and_failures(tmp_path, capsys):
    """A run evaluating IFBench next to IFEval (callbacks.checkpoint_eval.evals): IFBench's results and
    failures are kept apart; an IFBench failure is resolved only by an IFBench result of its step."""
    host = os.uname().nodename
    run = _run(tmp_path, "r", {"pid": None, "host": host, "finished": "t", "final_step": 20}, steps=(20,),
               evals={10: 0.25, 20: 0.5})
    run_metrics.record_checkpoint(run, 10, {"metrics": {"prompt_level_loose_acc": 0.125}}, "evals/ifbench/x",
                                  "callback", benchmark="ifbench")
    run_metrics.record_failure(run, 20, 1, "gave_up: exit code 1", 1, "", 100.0, benchmark="ifbench")
    status = run_status(run)
    assert (status["evaluated"], status["eval_step"]) == (2, 20)
    assert status["benchmarks"] == {"ifbench": {"eval_step": 10, "eval": {"prompt_level_loose_acc": 0.125},
                                                "evaluated": 1, "benchmark": "ifeval"}}  # results without a config
    assert [(f["step"], f["benchmark"]) for f in status["failures"]] == [(20, "ifbench")]  # IFEval's 20 is no fix
    assert main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "| r | ifbench | 1 | 10 | - | - | 12.5 | - |" in out
    assert "- r step 20 [ifbench] (attempt 1): gave_up: exit code 1" in out
    run_metrics.record_checkpoint(run, 20, {"metrics": {}}, "evals/ifbench/y", "backfill", benchmark="ifbench")
    assert run_status(run)["failures"] == []
