"""A run that diverges is stopped (or its steps skipped), recorded as ``diverged`` and can be continued.

Four short ``ifdistill-train`` runs of the tiny model (full fine-tuning, constant learning rate, a
checkpoint every step), in the order a researcher meets them:

- ``healthy``: learning rate 1e-3 for 2 steps (the finite state a diverging run starts from);
- ``stop``: the same with learning rate 1e30, started from ``healthy``'s step 2 (``run.resume_from``),
  a checkpoint every 2 steps, the checkpoint-eval callback due at the same steps and W&B offline: Adam's
  first update is ``lr * sign(g)``, so the weights after step 3 are ~1e30 (finite) and the loss of step 4
  is NaN. It must exit 3 with one line naming step 4 and the loss, record ``diverged`` in run.json,
  metrics.json, ``ifdistill-status`` and W&B, and write no checkpoint, export or evaluation of step 4;
  its last finite checkpoint is the one it started from;
- ``resumed``: the ``stop`` command with learning rate 1e-4 and ``run.resume_from=<stop's run dir>``:
  a new config hash, so a new run directory, starting from the last finite checkpoint (``healthy``'s
  step 2, since ``stop`` wrote none) and training with 1e-4, not the restored 1e30, to the end;
- ``skip``: learning rate 1e30 from the start with ``run.on_nonfinite=skip`` and one skip allowed: step
  1's update leaves finite weights of ~1e30 whose loss is NaN at step 2 (skipped: its checkpoint
  equals step 1's, byte for byte in every tensor) and at step 3 (past the bound: stopped like ``stop``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ifdistill.cli.status import run_status
from ifdistill.train.checkpointing import consolidated_state_dict
from ifdistill.tracking.wandb_offline import find_run_dirs, read_run

pytestmark = pytest.mark.slow

COMMON = [
    "model=tiny", "data=synthetic", "method=sft", "peft=none", "trainer=cpu", "logger=csv",
    "+data.sources.0.max_examples=16", "data.heldout=4", "data.max_length=256", "datamodule.micro_batch_size=2",
    "trainer.log_every_n_steps=1", "optim.schedule=constant", "run.eval_every_n_steps=1000",
    "run.validate_at_start=false", "run.checkpoint_every_n_steps=1", "run.keep_last_checkpoints=10",
]
SPARSE = ["run.checkpoint_every_n_steps=2", "callbacks=checkpoint_eval", "callbacks.checkpoint_eval.every_n_steps=2",
          "logger=wandb"]


def train_cli(root: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    """Run ``ifdistill-train``; returns the process and the run directory it named in run_dir.txt."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "CUDA_VISIBLE_DEVICES": ""}
    argv = [sys.executable, "-m", "ifdistill.cli.train", *COMMON, *extra, f"paths.output_root={root}",
            f"hydra.run.dir={root}/hydra"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    return proc, Path((root / "hydra" / "run_dir.txt").read_text().strip())


def launch(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())["launches"][-1]


def ckpt_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.name[5:11]) for p in (run_dir / "checkpoints").glob("step=*.ckpt"))


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("ifdistill-train:")]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    proc, run_dir = train_cli(tmp_path_factory.mktemp("healthy"), "optim.lr=1e-3", "trainer.max_steps=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def stopped(healthy, tmp_path_factory):
    root = tmp_path_factory.mktemp("stop")
    proc, run_dir = train_cli(root, "optim.lr=1e30", "trainer.max_steps=4", f"run.resume_from={healthy}", *SPARSE)
    return proc, run_dir, root


def test_stop_exits_3_with_one_line_and_records_diverged(stopped, healthy):
    proc, run_dir, _ = stopped
    assert proc.returncode == 3, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    origin = healthy / "checkpoints" / "step=000002.ckpt"
    assert line.startswith("ifdistill-train: training diverged: non-finite loss at optimizer step 4 "
                           "(run.on_nonfinite=stop)"), line
    assert f"the last finite checkpoint is {origin}" in line and f"run.resume_from={run_dir} " in line
    assert "Traceback" not in proc.stderr
    record = launch(run_dir)["diverged"]
    assert (record["step"], record["quantity"], record["checkpoint"]) == (4, "loss", str(origin))
    assert "finished" not in launch(run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["state"] == "diverged" and metrics["divergence"]["step"] == 4
    assert run_status(run_dir)["state"] == "diverged"
    (wandb_dir,) = find_run_dirs(run_dir / "logs" / "wandb")
    wb = read_run(wandb_dir)
    assert wb["exit_code"] == 3
    assert (wb["summary"]["run/state"], wb["summary"]["run/diverged_step"]) == ("diverged", 4)


def test_stop_writes_no_checkpoint_export_or_evaluation_of_the_diverged_step(stopped):
    _, run_dir, _ = stopped
    # checkpoint and checkpoint-eval callback were due at step 4: nothing was written, exported or evaluated
    assert ckpt_steps(run_dir) == []
    assert list((run_dir / "exports").iterdir()) == [] and list((run_dir / "evals").iterdir()) == []
    assert json.loads((run_dir / "metrics.json").read_text())["checkpoints"] == {}


def test_resume_with_a_smaller_learning_rate_is_a_new_run_from_the_last_finite_checkpoint(stopped, healthy,
                                                                                           tmp_path):
    _, stop_dir, _ = stopped
    proc, run_dir = train_cli(tmp_path, "optim.lr=1e-4", "trainer.max_steps=4", f"run.resume_from={stop_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_dir != stop_dir
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["config_hash"] != json.loads((stop_dir / "run.json").read_text())["config_hash"]
    assert meta["launches"][-1]["resumed_from"] == str(healthy / "checkpoints" / "step=000002.ckpt")
    assert f"this run's config hash is {meta['config_hash'][:12]}: a new run" in proc.stdout + proc.stderr
    assert ckpt_steps(run_dir) == [3, 4]  # it continued at step 2, where the healthy run stopped
    final = torch.load(run_dir / "checkpoints" / "step=000004.ckpt", map_location="cpu", weights_only=False)
    (group,) = final["optimizer_states"][0]["param_groups"]
    assert group["lr"] == group["initial_lr"] == 1e-4  # this run's rate, not the restored 1e30
    assert all(torch.isfinite(t).all() for t in final["state_dict"].values())


def test_skip_drops_the_step_then_stops_past_the_bound(tmp_path):
    proc, run_dir = train_cli(tmp_path, "optim.lr=1e30", "trainer.max_steps=4", "run.on_nonfinite=skip",
                              "run.max_skipped_steps=1", "logger=wandb")
    assert proc.returncode == 3, proc.stderr[-3000:]
    (line,) = error_lines(proc)
    assert line.startswith("ifdistill-train: training diverged: non-finite loss at optimizer step 3 "
                           "(run.on_nonfinite=skip, 1 steps skipped already)"), line
    assert "[divergence] non-finite loss at optimizer step 2: step skipped (1 of at most 1" in proc.stdout
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["nonfinite_skipped"] == [{"step": 2, "quantity": "loss"}] and metrics["state"] == "diverged"
    assert launch(run_dir)["diverged"]["checkpoint"] == str(run_dir / "checkpoints" / "step=000002.ckpt")
    assert ckpt_steps(run_dir) == [1, 2]
    first, skipped = (consolidated_state_dict(run_dir / "checkpoints" / f"step={s:06d}.ckpt") for s in (1, 2))
    assert all(torch.equal(first[k], skipped[k]) for k in first)  # the skipped step changed no weight
    assert all(torch.isfinite(t).all() for t in skipped.values())
    (wandb_dir,) = find_run_dirs(run_dir / "logs" / "wandb")
    assert read_run(wandb_dir)["summary"]["run/state"] == "diverged"
