"""``ifdistill-status``: runs found through a sweep's job dirs, their state, last step and latest evaluation."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ifdistill.results import run_metrics
from ifdistill.results.status import main, run_status


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
    assert len(table) == 4 and "| a | finished | 1 | 30 | 2 | 0 | 30 | 50.0 |" in table[2] and "| b | requeued |" in table[3]
    assert main([str(tmp_path / "missing")]) == 2
