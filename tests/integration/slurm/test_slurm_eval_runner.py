"""Evaluations as SLURM jobs on a real one-node SLURM: results collected, failures and retries seen."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.callbacks.eval_jobs import EvalJob, EvalQueue
from ifdistill.launchers.slurm_eval import SlurmRunner

pytestmark = [pytest.mark.slurm]

FAKE = r"""
import os, sys, pathlib
out = pathlib.Path(sys.argv[1])
if sys.argv[2] == "fail":
    print("failing on purpose", file=sys.stderr); sys.exit(7)
assert "RANK" not in os.environ and os.environ.get("IFDISTILL_MARK") == "yes"
out.mkdir(parents=True, exist_ok=True)
(out / "results.json").write_text('{"job": "%s"}' % os.environ.get("SLURM_JOB_ID"))
"""


def _job(tmp_path: Path, step: int, mode: str) -> EvalJob:
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK",)}
    env["IFDISTILL_MARK"] = "yes"
    out = tmp_path / "evals" / f"step_{step:06d}"
    return EvalJob(step, tmp_path, out, [sys.executable, str(script), str(out), mode], env)


def test_eval_job_runs_under_slurm_and_results_come_back(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")  # the trainer's variables must not reach the job
    q = EvalQueue(runner=SlurmRunner(time_min=5, cpus_per_task=1, mem_gb=1), poll_interval_s=0.5, retries=0)
    q.submit(_job(tmp_path, 100, "ok"))
    events = q.drain(120)
    assert [(e.kind, e.job.step) for e in events] == [("ok", 100)], [e.log_tail for e in events]
    assert '"job": "' in (tmp_path / "evals" / "step_000100" / "results.json").read_text()


def test_failed_slurm_job_is_retried_then_given_up(slurm, tmp_path):
    q = EvalQueue(runner=SlurmRunner(time_min=5, cpus_per_task=1, mem_gb=1), poll_interval_s=0.5, retries=1)
    q.submit(_job(tmp_path, 200, "fail"))
    events = q.drain(120)
    assert [e.kind for e in events] == ["failed", "gave_up"]
    assert events[0].exit_code == 7 and "failing on purpose" in events[0].log_tail


def test_training_run_evaluates_its_checkpoint_as_a_slurm_job(slurm, tmp_path):
    """A real training run (outside SLURM) with ``callbacks=checkpoint_eval_slurm``: the final checkpoint's
    evaluation is its own SLURM job, and its results reach the run's metrics.json and W&B run. The
    evaluator runs its HF backend here (a vLLM start-up would only add a minute; the command, the eval
    config and the collection path are the same)."""
    import json

    from ifdistill.tracking.wandb_offline import find_run_dirs, read_run

    out = tmp_path / "run"
    argv = [str(Path(sys.executable).parent / "ifdistill-train"), "experiment=demo", "logger=wandb",
            "callbacks=checkpoint_eval_slurm", "eval=synthetic", "eval.backend=hf",
            "eval.data.max_examples=8", "eval.generation.max_new_tokens=16", "eval.runtime.progress=false",
            "callbacks.checkpoint_eval.runner.gpus=null", "callbacks.checkpoint_eval.runner.cpus_per_task=1",
            "callbacks.checkpoint_eval.runner.mem_gb=2", "callbacks.checkpoint_eval.runner.time_min=10",
            "callbacks.checkpoint_eval.every_n_steps=100", "callbacks.checkpoint_eval.final_wait_s=300",
            "trainer.max_steps=4", "datamodule.micro_batch_size=4", "data.heldout=8", "run.eval_every_n_steps=4",
            f"paths.output_root={out}"]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (run_dir,) = [p.parent for p in (out / "train" / "runs").glob("*/run.json")]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert sorted(metrics["checkpoints"]) == ["4"] and metrics["failures"] == [], metrics["failures"]
    sbatch = (run_dir / "evals" / "step_000004.attempt1.sbatch").read_text()  # written only by SlurmRunner
    assert "ifdistill.evaluator.cli" in sbatch
    states = subprocess.run(["sacct", "-n", "-X", "-P", "-S", "now-15minutes", "--name=ifdistill-eval-4",
                             "-o", "State,WorkDir"], capture_output=True, text=True).stdout.split()
    assert any(s.startswith("COMPLETED|") for s in states), states
    results = json.loads((run_dir / "evals" / "step_000004" / "results.json").read_text())
    assert metrics["checkpoints"]["4"]["metrics"] == results["metrics"]
    (wandb_run,) = find_run_dirs(run_dir / "logs" / "wandb")
    rows = [r for r in read_run(wandb_run)["history"] if "ifeval/prompt_level_strict_acc" in r]
    assert [r["ifeval/step"] for r in rows] == [4]
    assert rows[0]["ifeval/prompt_level_strict_acc"] == pytest.approx(results["metrics"]["prompt_level_strict_acc"])


def test_a_checkpoint_backfilled_through_slurm_lands_like_a_callback_evaluation(slurm, tmp_path):
    """Training evaluates step 2 in a local process and leaves step 4 unevaluated (no time to wait at the
    end); ``ifdistill-eval backfill runner=slurm`` evaluates step 4 as a SLURM job. Both entries of
    metrics.json, both evaluation directories and both W&B rows have the same shape: the only
    difference is the ``source`` (and the runner's own files, the .sbatch script)."""
    import json

    from ifdistill.tracking.wandb_offline import find_run_dirs, read_run

    out = tmp_path / "run"
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "CUDA_VISIBLE_DEVICES": ""}
    argv = [str(bin_dir / "ifdistill-train"), "experiment=demo", "logger=wandb", "callbacks=checkpoint_eval",
            "eval=synthetic", "eval.backend=hf", "eval.data.max_examples=8", "eval.generation.max_new_tokens=16",
            "eval.runtime.progress=false", "callbacks.checkpoint_eval.every_n_steps=2",
            "callbacks.checkpoint_eval.at_end=false", "trainer.max_steps=4", "datamodule.micro_batch_size=4",
            "data.heldout=8", "run.eval_every_n_steps=4", f"paths.output_root={out}",
            # step 2 is waited for (policy wait, one slot); step 4 is still running when training ends
            "callbacks.checkpoint_eval.max_pending=0", "callbacks.checkpoint_eval.final_wait_s=0"]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (run_dir,) = [p.parent for p in (out / "train" / "runs").glob("*/run.json")]
    after_training = json.loads((run_dir / "metrics.json").read_text())
    assert sorted(after_training["checkpoints"]) == ["2"], after_training
    assert any(f["step"] == 4 and "missing at end" in f["reason"] for f in after_training["failures"])

    backfill = subprocess.run([str(bin_dir / "ifdistill-eval"), "backfill", f"run_dir={run_dir}", "runner=slurm",
                               "slurm.gpus=null", "slurm.cpus_per_task=1", "slurm.mem_gb=2", "slurm.time_min=10"],
                              env=env, capture_output=True, text=True, timeout=600)
    assert backfill.returncode == 0, backfill.stdout[-2000:] + backfill.stderr[-4000:]
    assert "[backfill] step 4: ok" in backfill.stdout
    sbatch = (run_dir / "evals" / "step_000004.attempt1.sbatch").read_text()  # written only by SlurmRunner
    assert "ifdistill.evaluator.cli" in sbatch
    assert not (run_dir / "evals" / "step_000002.attempt1.sbatch").exists()  # the callback's ran locally
    states = subprocess.run(["sacct", "-n", "-X", "-P", "-S", "now-15minutes", "--name=ifdistill-eval-4",
                             "-o", "State"], capture_output=True, text=True).stdout.split()
    assert "COMPLETED" in states, states

    metrics = json.loads((run_dir / "metrics.json").read_text())
    by_callback, by_backfill = metrics["checkpoints"]["2"], metrics["checkpoints"]["4"]
    assert (by_callback["source"], by_backfill["source"]) == ("callback", "backfill")
    assert set(by_callback) == set(by_backfill)
    assert by_callback["eval_config_hash"] == by_backfill["eval_config_hash"]
    assert by_backfill["results_dir"] == "evals/step_000004"
    results = json.loads((run_dir / "evals" / "step_000004" / "results.json").read_text())
    assert by_backfill["metrics"] == results["metrics"]
    assert by_backfill["per_instruction_type"] == results["per_instruction_type"]
    # one W&B run (the back-fill resumed the training run's id), both steps on the ifeval/step axis
    runs = [read_run(d) for d in find_run_dirs(run_dir / "logs" / "wandb")]
    assert len({r["id"] for r in runs}) == 1
    rows = {r["ifeval/step"]: r for run in runs for r in run["history"] if "ifeval/prompt_level_strict_acc" in r}
    assert sorted(rows) == [2, 4]
    assert {k for k in rows[2] if k.startswith("ifeval")} == {k for k in rows[4] if k.startswith("ifeval")}
    assert rows[4]["ifeval/prompt_level_strict_acc"] == pytest.approx(results["metrics"]["prompt_level_strict_acc"])
