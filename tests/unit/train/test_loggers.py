"""Launches that follow one another in one process (a local sweep) each get their own W&B run.

Real ``WandbLogger``s, offline, read back with :mod:`ifdistill.tracking.wandb_offline`; no training.
"""

from __future__ import annotations

import pytest

from ifdistill.runs.rundir import RunDir
from ifdistill.train.loggers import build_loggers, close_loggers
from ifdistill.tracking.wandb_offline import find_run_dirs, read_run


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield tmp_path
    wandb.teardown()


WANDB = {"_target_": "lightning.pytorch.loggers.WandbLogger", "project": "t", "offline": True}


def _launch(root, rid: str, value: float, *, close: bool = True):
    rd = RunDir(root / rid)
    rd.logs.mkdir(parents=True, exist_ok=True)
    loggers = build_loggers(WANDB, rd, rid, group="g")
    loggers[0].log_hyperparams({"sweep/ratio": value})
    for step in range(3):
        loggers[0].log_metrics({"train/loss": value + step}, step=step)
    if close:
        close_loggers(loggers)
    return rd


def _read(rd: RunDir) -> list[dict]:
    return [read_run(d) for d in find_run_dirs(rd.logs)]


def test_launches_in_one_process_write_separate_runs_with_their_own_config(wandb_env):
    a, b = _launch(wandb_env, "job-a", 0.0), _launch(wandb_env, "job-b", 0.5)
    (run_a,), (run_b,) = _read(a), _read(b)
    for run, rid, value in ((run_a, "job-a", 0.0), (run_b, "job-b", 0.5)):
        assert (run["id"], run["group"], run["exit_code"]) == (rid, "g", 0)
        assert run["config"]["sweep/ratio"] == value
        assert [r["train/loss"] for r in run["history"] if "train/loss" in r] == [value, value + 1, value + 2]


def test_a_run_left_open_is_finished_before_the_next_launch_starts_its_own(wandb_env):
    import wandb

    left_open = _launch(wandb_env, "job-a", 0.0, close=False)
    assert wandb.run is not None and wandb.run.id == "job-a"
    b = _launch(wandb_env, "job-b", 0.5)
    (run_a,), (run_b,) = _read(left_open), _read(b)
    assert run_a["id"] == "job-a" and run_a["config"]["sweep/ratio"] == 0.0  # not overwritten by job-b
    assert run_b["id"] == "job-b" and len([r for r in run_b["history"] if "train/loss" in r]) == 3


def test_a_resumed_launch_continues_its_own_run_and_a_failed_one_exits_nonzero(wandb_env):
    rd = _launch(wandb_env, "job-a", 0.0)
    loggers = build_loggers(WANDB, rd, "job-a", group="g")  # the same run id again: W&B resumes it
    loggers[0].log_metrics({"train/loss": 9.0}, step=3)
    close_loggers(loggers, failed=True)
    first, second = _read(rd)
    assert first["id"] == second["id"] == "job-a"
    assert (first["exit_code"], second["exit_code"]) == (0, 1)
