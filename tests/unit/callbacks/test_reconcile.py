"""What a relaunch finds left to do, and the evaluations it logs to W&B exactly once (real offline runs).

A run whose steps 2 and 4 are in ``metrics.json`` but whose W&B folder holds step 2 only -- the launch
that landed step 4 was killed before W&B wrote its block -- and whose final step 6 is checkpointed
without an export: the checkpoint-eval callback says so (``work_left``, what training asks before it
relaunches a finished run), the relaunch's W&B run gets step 4 and nothing else, and each step is then
in the run's W&B folders exactly once.
"""

from __future__ import annotations

import json

import pytest

from ifdistill.callbacks.checkpoint_eval import CheckpointEvalCallback
from ifdistill.callbacks.eval_logging import log_evaluation
from ifdistill.evaluator.results import publish
from ifdistill.results import run_metrics
from ifdistill.runs.rundir import RunDir, RunInfo
from ifdistill.tracking.wandb_offline import logged_steps


def _results(acc: float) -> dict:
    return {"metrics": {"prompt_level_strict_acc": acc, "prompt_level_strict_acc_stderr": 0.1},
            "per_instruction_type": {}, "config": {"eval": {"benchmark": "ifeval"}}}


@pytest.fixture
def run(tmp_path, monkeypatch) -> RunDir:
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    rd = RunDir(tmp_path / "run").create()
    for step, acc in ((2, 0.25), (4, 0.5)):
        export = rd.export_dir(step)
        export.mkdir(parents=True)
        (export / "export.json").write_text(json.dumps({"step": step}))
        publish(rd.eval_dir(step), _results(acc), [])
        run_metrics.record_checkpoint(rd.root, step, _results(acc), f"evals/step_{step:06d}", "callback")
    (rd.root / "checkpoints").mkdir(exist_ok=True)  # the killed launch checkpointed step 6, then died
    (rd.root / "checkpoints" / "step=000006.ckpt").write_bytes(b"")
    first = _logger(rd)  # the killed launch's W&B run got step 2 written, not step 4
    log_evaluation([first], 2, _results(0.25), rd.eval_dir(2))
    first.experiment.finish()
    yield rd
    wandb.teardown()


def _logger(rd: RunDir):
    from lightning.pytorch.loggers import WandbLogger

    return WandbLogger(project="t", save_dir=str(rd.logs), offline=True, id="r", name="r", resume="allow")


def _callback(rd: RunDir) -> CheckpointEvalCallback:
    return CheckpointEvalCallback(eval_cfg={"benchmark": "ifeval"}, run=RunInfo(rd, run_id="r"), every_n_steps=2)


def test_work_left_and_each_missing_wandb_row_logged_once(run):
    logger = _logger(run)
    assert _callback(run).work_left(6, 6, [logger]) == [
        "step 6: checkpointed, not exported", "step 4: in metrics.json, not in W&B"]
    assert _callback(run).work_left(6, 6, []) == ["step 6: checkpointed, not exported"]  # no W&B: no W&B rows
    # a step restored from another run's checkpoint (run.resume_from) is not this run's to export
    assert _callback(run).work_left(8, 8, []) == []

    logged = _callback(run).evaluations.log_unlogged([logger])  # the relaunch's own W&B run (open now)
    assert logged == [(None, 4)]
    logger.experiment.finish()
    assert logged_steps(run.logs / "wandb") == {"ifeval": {2: 1, 4: 1}}

    (run.export_dir(6)).mkdir()
    (run.export_dir(6) / "export.json").write_text(json.dumps({"step": 6}))
    assert _callback(run).work_left(6, 6, [_logger(run)]) == ["step 6: exported, not evaluated"]
    run_metrics.record_checkpoint(run.root, 6, _results(0.75), "evals/step_000006", "callback")
    publish(run.eval_dir(6), _results(0.75), [])
    assert _callback(run).work_left(6, 6, [_logger(run)]) == ["step 6: in metrics.json, not in W&B"]
    assert _callback(run).work_left(6, 6, []) == []


@pytest.mark.parametrize("kind,removed", [("failed", False), ("gave_up", True)])
def test_what_a_killed_publisher_left_goes_when_its_job_gives_up(run, kind, removed):
    """An evaluator killed while publishing step 6 leaves ``.step_000006.partial-*`` beside its output
    directory (evaluator/results.py's module docstring). A ``failed`` attempt is retried, and the retry may be
    publishing: it stays. A job that gave up has no attempt left: it goes, and the step is missing."""
    from ifdistill.callbacks.eval_jobs import EvalEvent, EvalJob

    out = run.eval_dir(6)
    partial = out.parent / f".{out.name}.partial-k1lled"
    partial.mkdir(parents=True)
    (partial / "samples.jsonl").write_text("{}\n")
    evaluations = _callback(run).evaluations
    evaluations.land([EvalEvent(kind, EvalJob(6, run.export_dir(6), out, [], {}, attempt=2), "killed by signal 9")],
                     [])
    assert partial.exists() is not removed
    assert evaluations.missing == ([6] if kind == "gave_up" else [])
