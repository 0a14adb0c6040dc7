"""metrics.json: entries accumulate, concurrent writers lose nothing, writes are atomic."""

from __future__ import annotations

import json
import multiprocessing as mp

from ifdistill.results import run_metrics


def _writer(run_dir, step):
    run_metrics.record_checkpoint(run_dir, step, {"eval_config_hash": "h", "metrics": {"m": step}},
                                  f"evals/step_{step:06d}", "callback")


def test_checkpoints_failures_and_train_accumulate(tmp_path):
    run_metrics.update(tmp_path, lambda d: d.update(run_metrics.empty("r1", "c1", seed=3)))
    run_metrics.record_checkpoint(tmp_path, 200, {"eval_config_hash": "e", "metrics": {"a": 1.0}}, "x", "callback")
    run_metrics.record_checkpoint(tmp_path, 200, {"eval_config_hash": "e", "metrics": {"a": 2.0}}, "x", "backfill")
    run_metrics.record_failure(tmp_path, 400, 1, "timeout", None, "tail", 0.0)
    run_metrics.record_train_metrics(tmp_path, 200, {"train/tfa": 0.5})
    data = json.loads((tmp_path / "metrics.json").read_text())
    assert data["run_id"] == "r1" and data["seed"] == 3
    assert data["checkpoints"]["200"]["metrics"] == {"a": 2.0} and data["checkpoints"]["200"]["source"] == "backfill"
    assert data["failures"][0]["reason"] == "timeout"
    assert data["train"]["200"] == {"train/tfa": 0.5}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".metrics.json.") and p.suffix != ".lock"]


def test_concurrent_writers_lose_no_entry(tmp_path):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), s)) for s in range(1, 17)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert sorted(int(k) for k in run_metrics.read(tmp_path)["checkpoints"]) == list(range(1, 17))
