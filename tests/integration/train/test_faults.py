"""Faults a user meets, with the real ``ifdistill-train``: the same command twice at once, and a disk that
fills up in the middle of a checkpoint (then space is freed and the command re-run)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.support import small_filesystem
from tests.integration.train.runs import COMMON, ROOT, STEPS, STRATEGIES, _tail, command, env, run_dir

pytestmark = pytest.mark.slow


def _run(cmd: list[str], log: Path, timeout: float = 420, extra_env: dict | None = None) -> int:
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**env(), **(extra_env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"timed out\n{_tail(log)}") from None


def test_the_same_command_twice_at_once_is_refused_naming_the_holder(tmp_path):
    """The second launch exits 2 at once with the holder's host, pid and start time; it writes nothing
    into the run (one launch in run.json, one CSV version, no -v1 checkpoint)."""
    root = tmp_path / "twice"
    root.mkdir()
    # long enough to still run while the second launch starts (killed below)
    cmd = [a for a in command("single", root) if not a.startswith(("trainer.max_steps=", "hydra.run.dir="))]
    cmd += ["trainer.max_steps=100000"]
    first_log = root / "first.log"
    first = subprocess.Popen(cmd + [f"hydra.run.dir={root}/hydra1"], cwd=ROOT, env=env(), stdout=first_log.open("ab"), stderr=subprocess.STDOUT,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        lock = None
        while time.monotonic() < deadline and first.poll() is None:
            runs = root / "train" / "runs"
            if runs.is_dir() and any(runs.iterdir()) and (run_dir(root) / "checkpoints" / "step=000002.ckpt").exists():
                lock = json.loads((run_dir(root) / "run.lock").read_text())
                break
            time.sleep(0.1)
        assert lock is not None, f"the first launch did not start\n{_tail(first_log)}"
        assert lock["pid"] == first.pid and lock["host"] == socket.gethostname()
        t0 = time.monotonic()
        second = subprocess.run(cmd + [f"hydra.run.dir={root}/hydra2"], cwd=ROOT, env=env(),
                                capture_output=True, text=True, timeout=300)
        seconds = time.monotonic() - t0
        assert first.poll() is None, "the first launch must still be running"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    print(f"second launch refused after {seconds:.1f} s", file=sys.stderr)
    assert second.returncode == 2, second.stderr[-3000:]
    line = second.stderr.strip().splitlines()[-1]
    assert line.startswith("ifdistill-train: error: run directory") and "Traceback" not in second.stderr
    assert f"in use by pid {first.pid} on host {socket.gethostname()}, started {lock['started']}" in line
    rd = run_dir(root)
    assert len(json.loads((rd / "run.json").read_text())["launches"]) == 1
    assert len(list((rd / "logs" / "csv").glob("version_*"))) == 1
    assert not [p for p in rd.rglob("*") if "-v1" in p.name]


def _tensors(ckpt: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a Lightning checkpoint file: weights, optimizer state, by a flat key."""
    out: dict[str, torch.Tensor] = {}

    def walk(prefix: str, obj) -> None:
        if isinstance(obj, torch.Tensor):
            out[prefix] = obj
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{prefix}/{k}", v)
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(f"{prefix}/{i}", v)

    state = torch.load(ckpt, map_location="cpu", weights_only=False)
    walk("", {k: state[k] for k in ("state_dict", "optimizer_states", "lr_schedulers")})
    return out


def test_a_full_disk_mid_checkpoint_then_a_rerun_ends_as_the_uninterrupted_run(runs, tmp_path):
    """A tmpfs that holds 2.5 checkpoints: the step-6 save hits ENOSPC (steps 2 and 4 are on disk) and the
    run stops with one line naming the file and the free space, leaving no partial file. step 4 is then
    cut short by hand (what a non-atomic writer left behind before), space is freed and the same command
    re-run: step 4 is set aside, the run resumes from step 2 and ends bit-identical (every tensor of the
    final checkpoint, weights and optimizer state) to the uninterrupted run, keeping exactly its newest
    ``keep_last_checkpoints=2`` checkpoints."""
    ref = runs.get("single")
    ref_dir = Path(ref["run_dir"]) / "checkpoints"
    size = (ref_dir / "step=000002.ckpt").stat().st_size
    fs = tmp_path / "fs"
    cmd = command("single", fs)[:-1] + [f"hydra.run.dir={tmp_path}/hydra", "run.keep_last_checkpoints=2"]
    log = tmp_path / "faulted.log"
    with small_filesystem(fs, int(2.5 * size) + 2**20) as resize:
        code = _run(cmd, log)
        text = log.read_text()
        assert code == 2, _tail(log)
        ckpts = run_dir(fs) / "checkpoints"
        target = ckpts / "step=000006.ckpt"
        line = text.strip().splitlines()[-1]
        assert line.startswith(f"ifdistill-train: error: no space left to write checkpoint {target} (")
        assert " MiB free on that filesystem)" in line and "Traceback" not in text
        assert sorted(p.name for p in ckpts.iterdir()) == ["step=000002.ckpt", "step=000004.ckpt"]  # no temp file
        with open(ckpts / "step=000004.ckpt", "r+b") as f:
            f.truncate(size // 2)
        resize(str(8 * size))
        assert _run(cmd, log) == 0, _tail(log)
        rerun = log.read_text()[len(text):]
        assert "[checkpoint] step=000004.ckpt is incomplete or unreadable: moved to" in rerun
        summary = json.loads([ln for ln in rerun.splitlines() if ln.startswith('{"run_id"')][-1])
        assert summary["resumed_from"].endswith("step=000002.ckpt") and summary["global_step"] == STEPS
        assert sorted(p.name for p in ckpts.iterdir()) == ["set_aside", "step=000006.ckpt", "step=000008.ckpt"]
        assert [p.name.rsplit(".", 1)[0] for p in (ckpts / "set_aside").iterdir()] == ["step=000004.ckpt"]
        a, b = _tensors(ref_dir / f"step={STEPS:06d}.ckpt"), _tensors(ckpts / f"step={STEPS:06d}.ckpt")
        assert a.keys() == b.keys() and len(a) > 10
        unequal = [k for k in a if not torch.equal(a[k], b[k])]
        assert not unequal, unequal[:5]
        launches = json.loads((run_dir(fs) / "run.json").read_text())["launches"]
        assert len(launches) == 2 and launches[1]["final_step"] == STEPS


def test_a_full_disk_at_an_export_after_a_checkpoint_is_one_line_exit_2_and_recorded(tmp_path):
    """The step-1 checkpoint is written; then the filesystem is shrunk to what it holds plus 2 MiB, so the
    step-2 export (the model's weights, ~17 MB) cannot be written: safetensors' own error, which is no
    ``OSError``, ends the run as one line naming the export and the free space, exit 2, the same line in
    run.json; the export's temp folder is gone and the step-1 checkpoint is intact (a re-run resumes from it)."""
    from ifdistill.train.checkpointing import is_complete

    fs = tmp_path / "fs"
    cmd = [sys.executable, "-m", "ifdistill.cli.train", *STRATEGIES["single"], "peft=none",
           *[a for a in COMMON if not a.startswith(("peft", "trainer.max_steps=", "run.checkpoint_every_n_steps=",
                                                     "+data.sources.0.max_examples=", "data.heldout=",
                                                     "data.max_length="))],
           "+data.sources.0.max_examples=16", "data.heldout=4", "data.max_length=256",
           f"paths.output_root={fs}", f"hydra.run.dir={tmp_path}/hydra", "trainer.max_steps=2", "run.checkpoint_every_n_steps=1",
           "run.validate_at_start=false",
        "callbacks=checkpoint_eval", "callbacks.checkpoint_eval.every_n_steps=2",
        "callbacks.checkpoint_eval.final_wait_s=0"]
    log = tmp_path / "export.log"
    with small_filesystem(fs, "512m") as resize, log.open("ab") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            deadline, shrunk = time.monotonic() + 300, False
            while time.monotonic() < deadline and proc.poll() is None and not shrunk:
                runs = fs / "train" / "runs"
                ckpt = run_dir(fs) / "checkpoints" / "step=000001.ckpt" if runs.is_dir() and any(runs.iterdir()) else None
                if ckpt is not None and ckpt.exists() and is_complete(ckpt):
                    used = shutil.disk_usage(fs).used
                    resize(str(used + 2 * 2**20))
                    shrunk = True
                time.sleep(0.02)
            assert shrunk, f"the step-1 checkpoint never appeared\n{_tail(log)}"
            code = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        text = log.read_text()
        rd = run_dir(fs)
        export = rd / "exports" / "step_000002"
        line = text.strip().splitlines()[-1]
        assert code == 2, _tail(log)
        assert line.startswith(f"ifdistill-train: error: no space left to write export {export} ("), line
        assert line.endswith(" MiB free on that filesystem); free space and re-run the same command"), line
        assert "Traceback" not in text and "Error executing job" not in text
        launch = json.loads((rd / "run.json").read_text())["launches"][-1]
        assert launch["failure"] == line.removeprefix("ifdistill-train: error: ")
        assert not (rd / "exports").exists() or not list((rd / "exports").iterdir())  # no temp folder left
        assert sorted(p.name for p in (rd / "checkpoints").iterdir()) == ["step=000001.ckpt"]
        assert is_complete(rd / "checkpoints" / "step=000001.ckpt", verify=True)
