"""Sweeps through the real launchers: the slurm launcher config on a one-node SLURM, and the local one.

The sweep is the ``ifeval_replay_sweep`` preset narrowed to tiny runs (tiny model, synthetic data with
the synthetic chat set as replay, CPU, a few steps), so what runs is the preset's own composition:
run names from the swept values, one W&B group per sweep, the slurm launcher's task layout.

- SLURM: a 2-job array (replay ratio 0 and 0.5). Job 0 gets ``scancel --signal=USR2`` once its first
  checkpoint is on disk: what ``--signal=USR2@<signal_delay_s>`` delivers before a time limit (and a
  preemption on Slurm >= 23.02 with ``send_user_signal``; 22.05 sends no warning signal, see
  ../shared/notes/slurm-localhost.md). It must save its step, requeue, come back as the same run (run
  dir, W&B run id) and end with the final weights of the same config trained without interruption
  (trained here afterwards, outside SLURM). Not ``--signal=TERM`` first, as submitit's own tests do:
  TERM reaches every process of the job and ends W&B's service process (wandb/wandb#9963), so a
  TERM-then-USR2 job cannot log any more; Slurm's real preemption requeues it anyway, from the last
  periodic checkpoint.
- SLURM: a sweep with a job that fails ends with a clear non-zero exit, not a hang.
- Local launcher: the same sweep runs its jobs one after the other.
- An evaluation submitted as its own SLURM job reaches the training run's metrics.json and W&B run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ifdistill.train.checkpointing import consolidated_state_dict, find_resume_checkpoint
from ifdistill.tracking.wandb_offline import find_run_dirs, read_run

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
STEPS = 16
TINY = [
    "experiment=ifeval_replay_sweep", "model=tiny", "data=synthetic_replay", "peft=none", "trainer=cpu",
    "trainer.accelerator=cpu", "trainer.devices=1", "trainer.accumulate_grad_batches=1",
    "gradient_checkpointing=false", "callbacks=none", "logger=wandb", "method=sft", "seed=1",
    "+data.sources.0.max_examples=96", "data.heldout=8", "data.max_length=256",
    "datamodule.micro_batch_size=4", "datamodule.val_batch_size=8", "optim.lr=1e-3", "optim.warmup_steps=2",
    f"trainer.max_steps={STEPS}", "trainer.log_every_n_steps=1", "run.eval_every_n_steps=8",
    "run.checkpoint_every_n_steps=4", "run.keep_last_checkpoints=10",
]
SLURM = ["hydra/launcher=slurm", "hydra.launcher.timeout_min=60", "hydra.launcher.cpus_per_task=1",
         "hydra.launcher.mem_gb=3"]


def _env() -> dict[str, str]:
    return {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false"}


def _train(out: Path, *args: str, multirun: bool = False) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "ifdistill.cli.train", *(["-m"] if multirun else []), *TINY, *args,
            f"paths.output_root={out}",
            f"hydra.sweep.dir={out}/sweep", f"hydra.run.dir={out}/job"]
    return subprocess.Popen(argv, cwd=ROOT, env=_env(), stdout=(out / "cli.log").open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _finish(proc: subprocess.Popen, out: Path, timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        subprocess.run(["scancel", "--name=__main__"], capture_output=True)
        raise AssertionError(f"sweep still running after {timeout} s\n{_log(out)}") from None


def _log(out: Path, n: int = 60) -> str:
    text = "\n".join((out / "cli.log").read_text(errors="replace").splitlines()[-n:])
    for f in sorted((out / "sweep" / ".submitit").glob("*/*_log.*")) if (out / "sweep").is_dir() else []:
        text += f"\n--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-25:])
    return text


def _runs(out: Path) -> dict[str, Path]:
    """run name (without the hash) -> run dir."""
    return {p.name.rsplit("-", 1)[0]: p for p in (out / "train" / "runs").iterdir() if (p / "run.json").is_file()}


def _array_task(sweep: Path, task: int) -> str:
    """The SLURM id (``<array>_<task>``) of one task of the sweep, from submitit's folder."""
    for d in (sweep / ".submitit").glob(f"*_{task}"):
        return d.name
    raise FileNotFoundError(f"no submitit folder of task {task} under {sweep}")


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    ckpt = find_resume_checkpoint(run_dir / "checkpoints")
    assert ckpt is not None and ckpt.name == f"step={STEPS:06d}.ckpt", ckpt
    return consolidated_state_dict(ckpt)


@pytest.mark.slurm
def test_slurm_sweep_with_a_requeued_job_ends_like_an_uninterrupted_run(slurm, tmp_path):
    out = tmp_path / "slurm"
    proc = _train(out, *SLURM, "data.ratio=0,0.5", multirun=True)
    name = "ratio-0_method-sft_seed-1"
    deadline, signalled = time.monotonic() + 240, None
    while proc.poll() is None and time.monotonic() < deadline:
        runs = _runs(out) if (out / "train" / "runs").is_dir() else {}
        if name in runs and (runs[name] / "checkpoints" / "step=000004.ckpt").exists():
            signalled = _array_task(out / "sweep", 0)
            subprocess.run(["scancel", "--signal=USR2", signalled], check=True)
            break
        time.sleep(0.2)
    assert signalled, f"job 0 never reached its first checkpoint\n{_log(out)}"
    assert _finish(proc, out, 420) == 0, _log(out)

    runs = _runs(out)
    assert sorted(runs) == ["ratio-0.5_method-sft_seed-1", name]
    meta = json.loads((runs[name] / "run.json").read_text())
    assert len(meta["launches"]) == 2, meta["launches"]
    first, second = meta["launches"]
    assert "SIGUSR2" in first["stop_reason"] and 4 <= first["stopped_at_step"] < STEPS
    assert second["resumed_from"].endswith(f"step={first['stopped_at_step']:06d}.ckpt")
    assert second["final_step"] == STEPS
    # The untouched job ran once; each job dir of the sweep points at its run.
    assert len(json.loads((runs["ratio-0.5_method-sft_seed-1"] / "run.json").read_text())["launches"]) == 1
    pointed = {Path(p.read_text().strip()) for p in (out / "sweep").glob("*/run_dir.txt")}
    assert pointed == set(runs.values())
    status = subprocess.run([sys.executable, "-m", "ifdistill.cli.status", "--json", str(out / "sweep")],
                            capture_output=True, text=True, check=True).stdout
    rows = {json.loads(line)["run_id"].rsplit("-", 1)[0]: json.loads(line) for line in status.splitlines()}
    assert {k: (r["state"], r["launches"], r["last_step"]) for k, r in rows.items()} == {
        name: ("finished", 2, STEPS), "ratio-0.5_method-sft_seed-1": ("finished", 1, STEPS)}

    # W&B: the requeued job continued the same run id, in the sweep's group, without gaps.
    wb = [read_run(d) for d in find_run_dirs(runs[name] / "logs" / "wandb")]
    assert len(wb) == 2 and {r["id"] for r in wb} == {meta["run_id"]}
    assert {r["group"] for r in wb} == {f"ifeval_replay_sweep-{(out / 'sweep').name}"}
    steps = sorted({int(h["trainer/global_step"]) for r in wb for h in r["history"] if "train/loss" in h})
    assert steps and steps[-1] == STEPS - 1 and len(steps) == STEPS

    # Same config trained straight through, outside SLURM: bit-identical final weights.
    ref_out = tmp_path / "straight"
    ref = _train(ref_out, "data.ratio=0", "logger=csv")
    assert _finish(ref, ref_out, 300) == 0, _log(ref_out)
    (ref_dir,) = _runs(ref_out).values()
    assert ref_dir.name == runs[name].name  # same name and config hash
    a, b = _final_weights(ref_dir), _final_weights(runs[name])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slurm
def test_slurm_sweep_with_a_failing_job_fails_clearly(slurm, tmp_path):
    out = tmp_path / "failing"
    proc = _train(out, *SLURM, "data.ratio=0,1.5", "trainer.max_steps=2", "logger=csv", multirun=True)
    code = _finish(proc, out, 300)
    log = (out / "cli.log").read_text(errors="replace")
    assert code != 0, log[-3000:]
    # the failed job's own one-line preflight error (the job and the value that is wrong), relayed by submitit
    assert ("ifdistill-train: job 1 (data.ratio=1.5 method=sft seed=1): error: "
            "data.ratio=1.5 must be a number in [0, 1)") in log, log[-3000:]
    assert "Traceback" not in log.split("Error stream produced:")[-1], log[-3000:]


def test_local_launcher_runs_the_same_sweep(tmp_path):
    out = tmp_path / "local"
    proc = _train(out, "hydra/launcher=local", "data.ratio=0,0.5", "trainer.max_steps=4", "logger=csv",
                  multirun=True)
    assert _finish(proc, out, 300) == 0, _log(out)
    runs = _runs(out)
    assert sorted(runs) == ["ratio-0.5_method-sft_seed-1", "ratio-0_method-sft_seed-1"]
    for run_dir in runs.values():
        assert json.loads((run_dir / "run.json").read_text())["launches"][-1]["final_step"] == 4
