"""Running ``ifdistill-train`` as a user does (a subprocess, Lightning launching the ranks), and killing it.

Every run of one test session shares a small setting (tiny model + LoRA r=4, 64 synthetic examples,
2 per micro-batch, checkpoints every 2 steps) and differs only by strategy / world size. Runs are
cached by name for the session, so several tests compare the same runs without training twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Sequence
from typing import Optional

import torch

from ifdistill.train.checkpointing import consolidated_state_dict, find_resume_checkpoint, is_complete

ROOT = Path(__file__).resolve().parents[3]
STEPS = 8
LR = 1e-4  # AdamW, constant schedule (the strategy tests derive their tolerance from lr * steps)

COMMON = [
    "model=tiny", "data=synthetic", "method=sft", "peft=lora", "peft.r=4", "peft.alpha=8", "peft.dropout=0.1",
    "logger=csv",
    "+data.sources.0.max_examples=64", "data.heldout=16", "data.max_length=384",
    "datamodule.micro_batch_size=2", "datamodule.val_batch_size=4",
    f"trainer.max_steps={STEPS}", "trainer.log_every_n_steps=1", "trainer.gradient_clip_val=0",
    f"optim.lr={LR}", "optim.schedule=constant",
    "run.eval_every_n_steps=1000", "run.checkpoint_every_n_steps=2", "run.keep_last_checkpoints=10",
]
WORLD2 = ["trainer.accelerator=cpu", "trainer.devices=2"]
STRATEGIES = {
    "single": ["trainer=cpu"],
    "ddp": ["trainer=ddp", *WORLD2],
    "zero2": ["trainer=deepspeed_stage_2", *WORLD2],
    # persistence threshold 0: really shard the tiny model's small tensors across the two ranks
    "zero3": ["trainer=deepspeed_stage_3", *WORLD2, "++trainer.strategy.zero.stage3_param_persistence_threshold=0"],
    "fsdp2": ["trainer=fsdp", *WORLD2],
}


def command(strategy: str, root: Path, extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "ifdistill.cli.train", *STRATEGIES[strategy], *COMMON, *extra,
            f"paths.output_root={root}", f"hydra.run.dir={root}/hydra"]


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT), DS_ACCELERATOR="cpu", TOKENIZERS_PARALLELISM="false")
    return e


def run_dir(root: Path) -> Path:
    (d,) = list((root / "train" / "runs").iterdir())
    return d


def launch(strategy: str, root: Path, log: Path, extra: Sequence[str] = ()) -> subprocess.Popen:
    root.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(command(strategy, root, extra), cwd=ROOT, env=env(), stdout=log.open("ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def _tail(log: Path, n: int = 60) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-n:])


def train(strategy: str, root: Path, timeout: float = 420, extra: Sequence[str] = ()) -> dict:
    """Run to the end (``extra``: further overrides); returns the JSON summary the CLI prints on rank 0
    and the path of the run's log."""
    log = root / f"{strategy}.log"
    proc = launch(strategy, root, log, extra)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"{strategy} run timed out\n{_tail(log)}") from None
    if proc.returncode != 0:
        raise AssertionError(f"{strategy} run failed ({proc.returncode})\n{_tail(log)}")
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith("{\"run_id\"")]
    return {**json.loads(lines[-1]), "log": str(log)}


def train_killed_then_resumed(strategy: str, root: Path, kill_after_step: int = 2, timeout: float = 420,
                              sig: int = signal.SIGKILL) -> dict:
    """Start the run, signal it once checkpoint ``kill_after_step`` is on disk, then run the same command
    again. Returns the second run's summary plus ``killed_at`` (the step the first launch last saved).

    ``SIGKILL`` goes to the whole process group (a crash); ``SIGUSR2`` (a SLURM requeue signal) only to
    the launching process, i.e. rank 0: the ranks must agree to stop at the same step by themselves."""
    log = root / f"{strategy}.log"
    proc = launch(strategy, root, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        runs = root / "train" / "runs"
        if runs.is_dir() and any(runs.iterdir()):
            target = run_dir(root) / "checkpoints" / f"step={kill_after_step:06d}.ckpt"
            if target.exists() and is_complete(target):
                break
        time.sleep(0.02)
    if proc.poll() is not None:
        raise AssertionError(f"{strategy} run ended before it could be killed ({proc.returncode})\n{_tail(log)}")
    if sig == signal.SIGKILL:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    else:
        os.kill(proc.pid, sig)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"{strategy} run did not stop after {sig!r}\n{_tail(log)}") from None
        assert code == 0, f"{strategy} run stopped by {sig!r} exited {code}\n{_tail(log)}"
    newest = find_resume_checkpoint(run_dir(root) / "checkpoints")
    killed_at = int(newest.name.split("=")[1].split(".")[0]) if newest else 0
    assert killed_at < STEPS, f"the run had finished ({newest}) before the kill"
    summary = train(strategy, root, timeout=timeout)
    summary["killed_at"] = killed_at
    return summary


def lora_weights(run: dict, step: int = STEPS) -> dict[str, torch.Tensor]:
    ckpt = Path(run["run_dir"]) / "checkpoints" / f"step={step:06d}.ckpt"
    return {k: v.float() for k, v in consolidated_state_dict(ckpt).items() if "lora_" in k}


def csv_rows(run: dict) -> list[dict[str, str]]:
    """All rows of every launch's metrics.csv of a run, in launch order."""
    import csv

    rows = []
    for f in sorted((Path(run["run_dir"]) / "logs" / "csv").glob("version_*/metrics.csv")):
        with f.open() as fh:
            rows += list(csv.DictReader(fh))
    return rows


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a, (sorted(a)[:3], sorted(b)[:3])
    return max((a[k] - b[k]).abs().max().item() for k in a)


class Runs:
    """Session cache: ``runs.get("ddp")`` trains once, later calls return the same summary."""

    def __init__(self, base: Path):
        self.base = base
        self.cache: dict[str, dict] = {}

    def get(self, strategy: str, *, resumed: bool = False, sig: int = signal.SIGKILL, tag: Optional[str] = None,
            extra: Sequence[str] = ()) -> dict:
        """``extra``: further overrides of a run that is not resumed (name it with ``tag``)."""
        key = tag or (f"{strategy}-resumed-{signal.Signals(sig).name}" if resumed else strategy)
        if key not in self.cache:
            root = self.base / key
            t0 = time.monotonic()
            summary = (train_killed_then_resumed(strategy, root, sig=sig) if resumed
                       else train(strategy, root, extra=extra))
            summary["seconds"] = time.monotonic() - t0
            print(f"[runs] {key}: {summary['seconds']:.1f} s", file=sys.stderr)
            self.cache[key] = summary
        return self.cache[key]
