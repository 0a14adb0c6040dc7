"""A local sweep on W&B: one W&B run per job, a view built from the sweep itself, failed jobs named.

The replay-sweep preset narrowed to tiny runs (tiny model, synthetic data with replay, 4 steps, one
checkpoint evaluated by the HF evaluator backend) runs as a Hydra multirun on the local launcher, whose
jobs train one after another in one process: replay ratio {0, 0.5} x {SFT, distillation}, logger=wandb
(offline). Each job's W&B run is read back from its own run directory (:mod:`ifdistill.tracking.wandb_offline`):
its id, its swept values, one ``train/loss`` row per logging step and its own evaluation at its step.
The same sweep launched again resumes each job's run and continues that job's W&B run. The W&B view,
called as README shows it, reads the sweep's job configs: every key it plots is one a run logged. The
same sweep with ``trainer.accelerator=gpu`` on this machine (no GPU) fails each job with one line, runs
every job, ends non-zero and records ``failed`` with the cause in each run directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.results import run_metrics
from ifdistill.tracking.wandb_offline import find_run_dirs, read_run
from ifdistill.cli.wandb_view import main as view_main, metric_keys

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
STEPS = 4
JOB = [
    "experiment=ifeval_replay_sweep", "model=tiny", "data=synthetic_replay", "peft=none", "trainer=cpu",
    "trainer.devices=1", "trainer.accumulate_grad_batches=1", "gradient_checkpointing=false", "logger=wandb",
    "seed=2", "+data.sources.0.max_examples=32", "data.heldout=4", "data.max_length=256",
    "datamodule.micro_batch_size=4", "datamodule.val_batch_size=4", f"trainer.max_steps={STEPS}",
    "trainer.log_every_n_steps=1", f"run.eval_every_n_steps={STEPS}", f"run.checkpoint_every_n_steps={STEPS}",
    "eval=synthetic", "eval.backend=hf", "eval.data.max_examples=4", "eval.generation.max_new_tokens=8",
    "eval.runtime.progress=false",
]
SWEEP = ["data.ratio=0,0.5", "method=sft,distill"]
NAMES = {f"ratio-{r}_method-{m}_seed-2": (r, m) for r in ("0", "0.5") for m in ("sft", "distill")}


def _sweep(out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="",
               TOKENIZERS_PARALLELISM="false")
    argv = [sys.executable, "-m", "ifdistill.cli.train", "-m", *JOB, *args, f"paths.output_root={out}",
            f"hydra.sweep.dir={out}/sweep"]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def _runs(out: Path) -> dict[str, Path]:
    """run name (without the hash) -> run dir."""
    return {p.name.rsplit("-", 1)[0]: p for p in (out / "train" / "runs").iterdir() if (p / "run.json").is_file()}


def _wandb(run_dir: Path) -> list[dict]:
    return [read_run(d) for d in find_run_dirs(run_dir / "logs")]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    proc = _sweep(out, *SWEEP, "trainer.accelerator=cpu")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out


def test_each_job_of_a_local_sweep_logs_its_own_wandb_run(sweep):
    runs = _runs(sweep)
    assert sorted(runs) == sorted(NAMES)
    group = f"ifeval_replay_sweep-{(sweep / 'sweep').name}"
    for name, run_dir in runs.items():
        (wb,) = _wandb(run_dir)  # one W&B run per job, in the job's own run directory
        rid = json.loads((run_dir / "run.json").read_text())["run_id"]
        ratio, method = NAMES[name]
        assert (wb["id"], wb["group"], wb["exit_code"]) == (rid, group, 0), name
        assert {k: wb["config"][k] for k in ("sweep/ratio", "sweep/method", "sweep/seed")} == \
            {"sweep/ratio": float(ratio), "sweep/method": method, "sweep/seed": 2}, name
        losses = [r["trainer/global_step"] for r in wb["history"] if "train/loss" in r]
        assert sorted(losses) == list(range(STEPS)), (name, losses)  # one row per logging step, no other job's
        evals = [r for r in wb["history"] if "ifeval/prompt_level_strict_acc" in r]
        assert [r["ifeval/step"] for r in evals] == [STEPS], name  # its own checkpoint evaluation, once
        recorded = run_metrics.results_of(run_metrics.read(run_dir))[str(STEPS)]["metrics"]
        assert evals[0]["ifeval/prompt_level_strict_acc"] == recorded["prompt_level_strict_acc"], name


def _logged(runs: dict[str, Path]) -> tuple[set[str], set[str]]:
    history, summary = set(), set()
    for run_dir in runs.values():
        for wb in _wandb(run_dir):
            history |= set().union(*wb["history"])
            summary |= set(wb["summary"])
    return history, summary


def test_the_view_of_the_sweep_reads_only_keys_its_runs_logged(sweep, capsys):
    called_as_readme = ["experiment=ifeval_replay_sweep", f"hydra.sweep.dir={sweep / 'sweep'}", "--dry-run"]
    assert view_main(called_as_readme) == 0
    spec = json.loads(capsys.readouterr().out)
    assert view_main([str(sweep / "sweep"), "--dry-run"]) == 0  # the sweep directory alone
    assert json.loads(capsys.readouterr().out) == spec
    assert spec["group"] == f"ifeval_replay_sweep-{(sweep / 'sweep').name}"
    assert spec["groupby"] == ["sweep/ratio", "sweep/method"]  # the seed is averaged
    keys = metric_keys(spec)
    history, summary = _logged(_runs(sweep))
    assert keys["history"] <= history, sorted(keys["history"] - history)
    per_type = {k for k in keys["summary"] if k.startswith("ifeval_type/")}
    assert keys["summary"] - per_type <= summary, sorted(keys["summary"] - per_type - summary)
    # per-type keys exist only for the types the evaluated prompts hold: each one logged is in the panel
    logged_types = {k for k in summary if k.startswith("ifeval_type/") and k.endswith("/strict_acc")}
    assert logged_types and logged_types <= per_type
    # the held-out sets of this sweep's data (synthetic + its replay set), not the preset's defaults
    held_out = {k.split("/")[1] for k in keys["history"] if k.startswith("val/")}
    assert held_out and held_out <= {k.split("/")[1] for k in history if k.startswith("val/")}


def _exit_code(argv: list[str]) -> int:
    try:
        return view_main(argv)
    except SystemExit as stop:  # argparse's answer to a malformed flag
        return int(stop.code)


def test_a_path_or_a_malformed_argument_is_one_line_and_exit_2(sweep, capsys, tmp_path):
    for argv in ([str(tmp_path / "no_such_sweep"), "--dry-run"], [str(tmp_path), "--dry-run"],
                 ["experiment=ifeval_replay_sweep", "data.ratio=0,0.5", "--dry-run"], ["--no-such-flag"]):
        code = _exit_code(argv)
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (argv, err)


def test_a_relaunched_sweep_continues_each_jobs_own_wandb_run(sweep):
    before = {name: len(_wandb(d)) for name, d in _runs(sweep).items()}
    proc = _sweep(sweep, "data.ratio=0,0.5", "method=sft", "trainer.accelerator=cpu")  # two of the four jobs
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    for name, run_dir in _runs(sweep).items():
        wbs = _wandb(run_dir)
        rid = json.loads((run_dir / "run.json").read_text())["run_id"]
        resumed = NAMES[name][1] == "sft"
        assert len(wbs) == before[name] + resumed, name
        assert {wb["id"] for wb in wbs} == {rid}, name  # the launch continued this job's run, no other
        assert {wb["config"]["sweep/ratio"] for wb in wbs} == {float(NAMES[name][0])}, name


def test_a_sweep_this_machine_cannot_run_fails_each_job_in_one_line(tmp_path):
    proc = _sweep(tmp_path, "data.ratio=0,0.5", "method=sft", "trainer.accelerator=gpu")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ifdistill-train:")]
    assert len(lines) == 3, proc.stderr[-3000:]  # one per job, then the sweep's count
    for num, ratio in enumerate(("0", "0.5")):
        assert lines[num].startswith(f"ifdistill-train: job {num} (data.ratio={ratio} method=sft seed=2): error: "
                                     "trainer.accelerator=gpu"), lines[num]
    assert lines[2].startswith("ifdistill-train: 2 of 2 sweep jobs failed"), lines[2]
    runs = _runs(tmp_path)
    assert len(runs) == 2
    status = subprocess.run([sys.executable, "-m", "ifdistill.cli.status", "--json", str(tmp_path / "sweep")],
                            capture_output=True, text=True, check=True).stdout
    rows = [json.loads(line) for line in status.splitlines()]
    assert [r["state"] for r in rows] == ["failed", "failed"]
    assert all("trainer.accelerator=gpu" in r["failure"] and "cannot run it" in r["failure"] for r in rows), rows
    assert not any(find_run_dirs(d / "logs") for d in runs.values())  # no W&B run for a job that never trained
