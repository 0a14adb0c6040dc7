"""What a relaunch reconciles: a trainer killed (-9) while its final evaluation runs, relaunched.

One run (tiny model, 4 steps, a checkpoint, export and evaluation every 2 steps, W&B offline, the HF
evaluator backend: what matters here is the bookkeeping, not vLLM) is killed by a kill point
(:mod:`tests.integration.callbacks.kill_points`) at an exact state: the step-2 evaluation has landed in
``results.json`` and ``metrics.json`` and was handed to W&B, which had not written it to its file yet;
the step-4 checkpoint and export exist and its evaluation runs. Then the same command is run twice:

- the first relaunch restores step 4 = ``max_steps``, where Lightning's fit loop returns at once; it
  still evaluates step 4 (the lost final evaluation) and logs step 2 and 4 to W&B (the lost row), each once;
- the second relaunch finds the run finished with nothing missing and changes nothing: no launch
  entry, no W&B folder, no file rewritten.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.cli.status import run_status
from ifdistill.tracking.wandb_offline import find_run_dirs, logged_steps, parse_run_file, run_file

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
ARGS = [
    "experiment=demo", "callbacks=checkpoint_eval", "eval=synthetic", "logger=wandb",
    "trainer.max_steps=4", "trainer.log_every_n_steps=1", "run.eval_every_n_steps=2",
    "run.checkpoint_every_n_steps=2", "callbacks.checkpoint_eval.every_n_steps=2",
    "datamodule.micro_batch_size=4", "data.heldout=8", "eval.backend=hf", "eval.data.max_examples=4",
    "eval.generation.max_new_tokens=8", "eval.runtime.progress=false",
]
KILL = "tests.integration.callbacks.kill_points.KillAtFinalStep"


def _train(out: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    kill = [f"+callbacks.kill_point._target_={KILL}", f"+callbacks.kill_point.marker={out / 'killed'}",
            "+callbacks.kill_point.landed=[2]"]
    return subprocess.run([sys.executable, "-m", "ifdistill.cli.train", *ARGS, *kill, f"paths.output_root={out}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _files(run: Path) -> dict[str, tuple[int, int]]:
    """Every file of the run directory -> (size, mtime_ns): what a user could see change; but the lock and
    ``logs/console.log``, where each launch notes what it did."""
    return {str(p.relative_to(run)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(run.rglob("*"))
            if p.is_file() and p.name not in ("run.lock", "console.log")}


@pytest.fixture(scope="module")
def relaunched(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("relaunch")
    killed = _train(out)
    (run,) = [p.parent for p in (out / "train" / "runs").glob("*/run.json")]
    state = {"out": out, "run": run, "killed": killed,
             "metrics_killed": json.loads((run / "metrics.json").read_text()),
             "wandb_killed": logged_steps(run / "logs" / "wandb")}
    state["again"] = _train(out)
    state["files"] = _files(run)
    state["wandb_folders"] = find_run_dirs(run / "logs" / "wandb")
    state["third"] = _train(out)
    return state


def test_the_kill_point_left_the_final_evaluation_running_and_the_step_2_row_unwritten(relaunched):
    killed, run = relaunched["killed"], relaunched["run"]
    assert killed.returncode == -9, killed.stdout[-3000:] + killed.stderr[-3000:]
    assert (relaunched["out"] / "killed").read_text() == "killed at step 4\n"
    assert sorted(relaunched["metrics_killed"]["checkpoints"]) == ["2"]
    # W&B had the step-2 row in memory only: the killed launch's offline folder ends without it
    assert not relaunched["wandb_killed"].get("ifeval")


def test_the_final_evaluation_lost_to_the_kill_is_done_by_the_relaunch(relaunched):
    again, run = relaunched["again"], relaunched["run"]
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    assert sorted(metrics["checkpoints"], key=int) == ["2", "4"]
    assert (run / "evals" / "step_000004" / "results.json").is_file()
    status = run_status(run)
    assert (status["state"], status["last_step"], status["evaluated"], status["failures"]) == ("finished", 4, 2, [])


def test_the_wandb_rows_lost_to_the_kill_are_logged_once_by_the_relaunch(relaunched):
    run = relaunched["run"]
    assert logged_steps(run / "logs" / "wandb")["ifeval"] == {2: 1, 4: 1}  # each step exactly once
    metrics = json.loads((run / "metrics.json").read_text())
    files = [f for f in map(run_file, find_run_dirs(run / "logs" / "wandb")) if f is not None]
    rows = [r for f in files for r in parse_run_file(f, complete_only=True)["history"]
            if "ifeval/prompt_level_strict_acc" in r]
    for row in rows:  # the values metrics.json holds, at the checkpoint's step
        want = metrics["checkpoints"][str(row["ifeval/step"])]["metrics"]["prompt_level_strict_acc"]
        assert row["ifeval/prompt_level_strict_acc"] == want


def test_a_finished_run_relaunched_with_nothing_to_do_changes_nothing(relaunched):
    third, run = relaunched["third"], relaunched["run"]
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert "nothing is missing: nothing to do" in third.stdout + third.stderr
    assert "nothing to do" in (run / "logs" / "console.log").read_text().splitlines()[-1]
    assert _files(run) == relaunched["files"]  # no launch entry, no W&B folder, nothing rewritten
    assert find_run_dirs(run / "logs" / "wandb") == relaunched["wandb_folders"]
    assert len(json.loads((run / "run.json").read_text())["launches"]) == 2
    leftovers = [p for p in run.rglob("*") if p.name.endswith(".tmp") or ".partial-" in p.name]
    assert leftovers == []
