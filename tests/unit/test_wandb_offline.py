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


def _logged_run(root, rows: int, eval_steps=(100, 200)) -> "Path":
    """A finished offline run: ``rows`` training rows, then one evaluation row per step of ``eval_steps``."""
    import wandb

    run = wandb.init(project="t", dir=str(root), id="r1", resume="allow")
    for s in range(rows):
        run.log({"train/loss": 1.0 / (s + 1), "trainer/global_step": s})
    for s in eval_steps:
        run.log({"ifeval/prompt_level_strict_acc": s / 1000, "ifeval/step": s})
    run.finish()
    wandb.teardown()
    (folder,) = find_run_dirs(root)
    return folder


def test_a_killed_writers_file_counts_its_complete_records_only(wandb_env, tmp_path):
    """A file cut anywhere -- inside a record, at a block boundary, after the header -- reads as the
    records before the cut (what ``wandb sync`` has of it), and ``logged_steps`` counts the evaluation rows
    of every folder; a folder whose writer died before creating its file counts nothing."""
    from ifdistill.tracking.wandb_offline import (BLOCK, NotFlushedError, iter_records, logged_steps, parse_run_file,
                                              run_file)

    folder = _logged_run(wandb_env / "whole", rows=400)
    data = run_file(folder).read_bytes()
    assert len(data) > 2 * BLOCK  # records span blocks
    whole = [r.SerializeToString() for r in iter_records(run_file(folder))]
    for cut in (7, BLOCK, BLOCK + 1000, len(data) - 3):
        root = tmp_path / f"cut{cut}" / "wandb"
        copy = root / folder.name / run_file(folder).name
        copy.parent.mkdir(parents=True)
        copy.write_bytes(data[:cut])
        kept = [r.SerializeToString() for r in iter_records(copy, complete_only=True)]
        assert kept == whole[:len(kept)] and len(kept) < len(whole), cut
        if cut not in (7, BLOCK):  # a record cut short: unflushed to a reader that waits
            with pytest.raises(NotFlushedError):
                parse_run_file(copy)
    (tmp_path / "cut7" / "wandb" / "offline-run-20250101_000000-r1").mkdir()  # killed before its file existed
    assert logged_steps(tmp_path / "cut7") == {}
    assert logged_steps(wandb_env / "whole") == {"ifeval": {100: 1, 200: 1}}
    # two folders of one run (a launch and its relaunch) holding step 200 each: counted twice
    both = tmp_path / "both" / "wandb"
    for name in ("offline-run-20250101_000000-r1", "offline-run-20250101_000100-r1"):
        (both / name).mkdir(parents=True)
        (both / name / run_file(folder).name).write_bytes(data)
    assert logged_steps(both.parent, exclude=[both / "offline-run-20250101_000000-r1"]) == {"ifeval": {100: 1, 200: 1}}
    assert logged_steps(both.parent) == {"ifeval": {100: 2, 200: 2}}


def test_a_file_another_process_holds_open_is_waited_for(wandb_env):
    import subprocess
    import sys

    from ifdistill.tracking.wandb_offline import WandbFilesBusy, logged_steps, run_file, writers

    folder = _logged_run(wandb_env / "w", rows=3)
    path = run_file(folder)
    holder = subprocess.Popen([sys.executable, "-c", f"f = open({str(path)!r}, 'ab'); print(1, flush=True); "
                               "import time; time.sleep(60)"], stdout=subprocess.PIPE)
    try:
        holder.stdout.readline()
        assert writers([path]) == {path: [holder.pid]}
        with pytest.raises(WandbFilesBusy, match=f"open in process {holder.pid}"):
            logged_steps(wandb_env / "w", wait_s=0.5)
    finally:
        holder.kill()
        holder.wait()
    assert writers([path]) == {} and logged_steps(wandb_env / "w", wait_s=0.5) == {"ifeval": {100: 1, 200: 1}}


def test_rows_logged_before_a_kill_are_not_in_the_file(tmp_path):
    """What the relaunch's reconciliation rests on: wandb-core writes whole 32 KiB blocks, so rows a process
    logged seconds before ``kill -9`` are not in its offline file (a short run's file is its header)."""
    import os
    import subprocess
    import sys

    from ifdistill.tracking.wandb_offline import logged_steps, run_file

    code = ("import os, time, wandb\n"
            f"run = wandb.init(project='t', dir={str(tmp_path)!r}, id='k1', mode='offline')\n"
            "for s in (10, 20): run.log({'ifeval/acc': s / 100, 'ifeval/step': s})\n"
            "time.sleep(2)\n"
            "os.kill(os.getpid(), 9)\n")
    env = {**os.environ, "WANDB_SILENT": "true", "WANDB_MODE": "offline"}
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == -9
    (folder,) = find_run_dirs(tmp_path)
    assert run_file(folder).stat().st_size == 7
    assert logged_steps(tmp_path) == {}
