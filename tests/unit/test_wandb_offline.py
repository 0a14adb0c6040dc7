"""The offline-run reader sees what real wandb wrote: late eval steps, define_metric, tables, config."""

from __future__ import annotations

import pytest

from ifdistill.tracking.wandb_offline import find_run_dirs, load_table, read_run


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield tmp_path
    wandb.teardown()


def test_reads_history_summary_config_metrics_tables_and_late_steps(wandb_env):
    import wandb

    run = wandb.init(project="t", dir=str(wandb_env), config={"lr": 0.1, "model": {"name": "tiny"}})
    run.define_metric("trainer/step")
    run.define_metric("train/*", step_metric="trainer/step")
    run.define_metric("ifeval/step")
    run.define_metric("ifeval/*", step_metric="ifeval/step")
    for s in range(1, 301):
        run.log({"train/loss": 1.0 / s, "trainer/step": s})
    # An evaluation of step 100 arriving after training reached step 300.
    run.log({"ifeval/prompt_level_strict_acc": 0.25, "ifeval/step": 100})
    run.log({"ifeval/samples": wandb.Table(columns=["prompt", "ok"], data=[["a", True], ["b", False]]),
             "ifeval/step": 100})
    run.summary["final"] = 3
    run.finish()
    wandb.teardown()

    (run_dir,) = find_run_dirs(wandb_env)
    got = read_run(run_dir)
    assert got["exit_code"] == 0 and got["id"] == run.id
    assert got["config"]["lr"] == 0.1 and got["config"]["model"] == {"name": "tiny"}
    assert got["metrics"]["ifeval/*"] == "ifeval/step" and got["metrics"]["train/*"] == "trainer/step"
    train_rows = [r for r in got["history"] if "train/loss" in r]
    assert [r["trainer/step"] for r in train_rows] == list(range(1, 301))
    evals = [r for r in got["history"] if "ifeval/prompt_level_strict_acc" in r]
    assert len(evals) == 1 and evals[0]["ifeval/step"] == 100
    table_row = next(r for r in got["history"] if "ifeval/samples" in r)
    table = load_table(got, table_row["ifeval/samples"])
    assert table["columns"] == ["prompt", "ok"] and table["data"] == [["a", True], ["b", False]]
    assert got["summary"]["final"] == 3
