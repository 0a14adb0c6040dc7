"""config_hash ignores paths/logging keys and nothing else; the run directory follows from it."""

from __future__ import annotations

import json
import os

import pytest
from omegaconf import OmegaConf

from ifdistill.runs.rundir import HASH_IGNORE, RunDir, RunDirError, config_hash, hashed_config, run_id

BASE = {
    "seed": 42, "task_name": "train",
    "paths": {"output_root": "/a", "output_dir": "${hydra:runtime.output_dir}"},
    "model": {"name_or_path": "builtin:tiny"},
    "optim": {"lr": 1e-3},
    "trainer": {"max_steps": 10, "log_every_n_steps": 5, "enable_progress_bar": False},
    "logger": {"_target_": "x.CSVLogger"},
    "run": {"name": "demo", "eval_every_n_steps": 50},
    "data": {"cache": "${paths.output_root}/ignored-by-hash-only-if-under-paths"},
}


def cfg(**changes):
    c = OmegaConf.create(BASE)
    for k, v in changes.items():
        OmegaConf.update(c, k, v)
    return c


def test_hash_ignores_paths_loggers_run_and_logging_cadence():
    h = config_hash(cfg())
    assert len(h) == 64
    for key, value in [("paths.output_root", "/a"), ("logger._target_", "x.WandbLogger"), ("run.name", "other"),
                       ("run.eval_every_n_steps", 7), ("trainer.log_every_n_steps", 1),
                       ("trainer.enable_progress_bar", True)]:
        if key == "paths.output_root":
            continue  # data.cache interpolates it: see the next test
        assert config_hash(cfg(**{key: value})) == h, key


def test_hash_changes_with_what_is_trained():
    h = config_hash(cfg())
    for key, value in [("seed", 1), ("optim.lr", 2e-3), ("trainer.max_steps", 11), ("model.name_or_path", "x")]:
        assert config_hash(cfg(**{key: value})) != h, key


def test_hydra_only_values_never_need_to_resolve():
    # paths.output_dir uses the hydra resolver, which does not exist here; paths is ignored, so fine.
    hc = hashed_config(cfg())
    assert "paths" not in hc and "logger" not in hc and "run" not in hc
    assert hc["trainer"] == {"max_steps": 10}
    assert hc["data"]["cache"].startswith("/a/")  # resolved values enter the hash


def test_run_dir_layout_and_launch_record(tmp_path):
    c = cfg()
    h = config_hash(c)
    rd = RunDir(tmp_path / run_id("demo", h))
    meta = rd.write_launch(c, run_id=run_id("demo", h), digest=h, ignore=HASH_IGNORE, resumed_from=None)
    for sub in ("checkpoints", "exports", "logs", "data"):
        assert (rd.root / sub).is_dir()
    assert rd.root.name == f"demo-{h[:12]}"
    saved = json.loads(rd.run_json.read_text())
    assert saved["config_hash"] == h and saved["run_id"] == f"demo-{h[:12]}" and len(saved["launches"]) == 1
    assert "optim" in saved["hashed_config"]
    rd.write_launch(c, run_id=meta["run_id"], digest=h, ignore=HASH_IGNORE, resumed_from="step=000002.ckpt")
    assert [x["resumed_from"] for x in rd.read_meta()["launches"]] == [None, "step=000002.ckpt"]
    with pytest.raises(RunDirError, match=f"this run has config_hash {h}, the config given has 0000"):
        rd.write_launch(c, run_id="x", digest="0" * 64, ignore=HASH_IGNORE, resumed_from=None)
    assert len(rd.read_meta()["launches"]) == 2  # the refused launch is not recorded


HOLD = r"""
import sys, time
from ifdistill.train.run_lock import RunLock
lock = RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_run_lock_refuses_a_second_holder_naming_the_first_and_is_taken_over_when_it_dies(tmp_path):
    """A live holder (another process) is named in the refusal; once it is killed -9 (no clean
    release: its details stay in the file) the next launch takes the lock and records the takeover."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    from pathlib import Path

    from ifdistill.train.run_lock import RunLock, RunLockedError

    path = tmp_path / "run.lock"
    root = Path(__file__).resolve().parents[3]
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(root)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError) as refused:
            RunLock(path).acquire()
        msg = str(refused.value)
        assert f"pid {holder.pid} on host {socket.gethostname()}" in msg and "started 20" in msg
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    lock = RunLock(path).acquire()
    assert lock.took_over and lock.took_over["pid"] == holder.pid
    lock.release()
    assert path.read_text() == ""  # a clean end leaves nothing to take over
    again = RunLock(path).acquire()
    assert again.took_over is None
    again.release()


def test_without_flock_a_holder_is_judged_by_its_pid_and_a_requeued_slurm_job_takes_its_own_lock(monkeypatch):
    import socket
    import subprocess

    from ifdistill.train.run_lock import RunLock

    dead = subprocess.Popen(["true"])
    dead.wait()
    here = socket.gethostname()
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert RunLock._holder_gone({"host": here, "pid": dead.pid})
    assert not RunLock._holder_gone({"host": here, "pid": 1})  # alive
    assert not RunLock._holder_gone({"host": "elsewhere", "pid": dead.pid})  # cannot tell: refuse
    monkeypatch.setenv("SLURM_JOB_ID", "123")
    assert RunLock._holder_gone({"host": "elsewhere", "pid": 7, "slurm_job_id": "123"})  # requeued job
    assert not RunLock._holder_gone({"host": "elsewhere", "pid": 7, "slurm_job_id": "124"})


def test_check_refuses_a_live_holder_without_taking_or_creating_anything(tmp_path):
    from ifdistill.train.run_lock import RunLock, RunLockedError

    RunLock(tmp_path / "absent" / "run.lock").check()
    assert not (tmp_path / "absent").exists()
    held = RunLock(tmp_path / "run.lock").acquire()
    try:
        with pytest.raises(RunLockedError, match=f"in use by pid {os.getpid()}"):
            RunLock(tmp_path / "run.lock").check()
    finally:
        held.release()
    RunLock(tmp_path / "run.lock").check()  # released: no refusal
    RunLock(tmp_path / "run.lock").acquire().release()


def test_leftovers_of_writers_killed_mid_write_are_removed_and_nothing_else(tmp_path):
    """A process killed (-9) inside ``atomic_write`` of run.json, config.yaml, the manifest and metrics.json
    and an interrupted export leave temp files; the lock holder removes exactly those."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from ifdistill.results import run_metrics
    from ifdistill.runs.rundir import export_temp_prefix

    rd = RunDir(tmp_path / "run").create()
    run_metrics.record_checkpoint(rd.root, 10, {"metrics": {"prompt_level_strict_acc": 0.5}}, "evals/step_000010",
                                  "callback")
    (rd.export_dir(10)).mkdir(parents=True)
    (rd.export_dir(10) / "export.json").write_text("{}")
    before = sorted(p for p in rd.root.rglob("*"))
    targets = [str(p) for p in (rd.run_json, rd.config_yaml, rd.manifest, rd.metrics_json)]
    code = ("import contextlib, os, sys\nfrom ifdistill.paths import atomic_write\n"
            "with contextlib.ExitStack() as stack:\n"
            "    for path in sys.argv[1:]:\n"
            "        stack.enter_context(atomic_write(path)).write('half')\n"
            "    os.kill(os.getpid(), 9)\n")
    assert subprocess.run([sys.executable, "-c", code, *targets], timeout=60).returncode == -9
    tempfile.mkdtemp(prefix=export_temp_prefix(20), dir=rd.exports)  # as callbacks/export.py names it
    left = sorted(set(rd.root.rglob("*")) - set(before))
    assert len(left) == 5 and all(Path(p).name.startswith(".") for p in left)
    removed = rd.remove_leftovers() + run_metrics.remove_leftovers(rd.root)
    assert sorted(removed) == left and sorted(rd.root.rglob("*")) == before
