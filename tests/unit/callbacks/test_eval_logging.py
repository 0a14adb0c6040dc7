"""Each eval section's evaluations land in W&B under its own namespace and step axis (real offline run).

An IFEval and an IFBench evaluation of the same checkpoint, logged after training moved on, give
``ifeval/*`` on ``ifeval/step`` and ``ifbench/*`` on ``ifbench/step`` (and ``<benchmark>_type/*``);
a second section of one benchmark (``evals.hard``, IFBench again) logs ``hard/*`` on ``hard/step``,
never into the first's keys; a results.json without ``config.eval.benchmark`` (written before the
field existed) stays IFEval.
"""

from __future__ import annotations

import pytest

from ifdistill.callbacks.eval_logging import benchmark_of, flat_metrics, log_evaluation
from ifdistill.evaluator.benchmark import namespaces
from ifdistill.wandb_offline import find_run_dirs, read_run


def results(benchmark: str | None, acc: float) -> dict:
    config = {"eval": {"benchmark": benchmark}} if benchmark else {}
    return {"metrics": {"prompt_level_loose_acc": acc, "prompt_level_loose_acc_stderr": 0.01},
            "per_instruction_type": {"x:y": {"strict": acc, "loose": acc}}, "config": config}


def test_benchmark_defaults_to_ifeval():
    assert benchmark_of(results(None, 0.1)) == "ifeval"
    assert set(flat_metrics(results("ifbench", 0.1))) == {
        "ifbench/prompt_level_loose_acc", "ifbench/prompt_level_loose_acc_stderr",
        "ifbench_type/x:y/strict", "ifbench_type/x:y/loose"}


@pytest.fixture
def wandb_logger(tmp_path, monkeypatch):
    import wandb
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    logger = WandbLogger(project="t", save_dir=str(tmp_path), offline=True)
    yield logger, tmp_path
    wandb.teardown()


def test_two_benchmarks_two_step_axes(wandb_logger, tmp_path):
    logger, wandb_dir = wandb_logger
    run = logger.experiment
    for s in range(1, 51):
        run.log({"train/loss": 1.0 / s})
    log_evaluation([logger], 20, results(None, 0.25), tmp_path)
    log_evaluation([logger], 20, results("ifbench", 0.125), tmp_path)
    log_evaluation([logger], 40, results("ifbench", 0.5), tmp_path, section="ifbench")
    log_evaluation([logger], 40, results("ifbench", 0.75), tmp_path, section="hard")
    run.finish()
    (run_dir,) = find_run_dirs(wandb_dir)
    got = read_run(run_dir)
    assert got["metrics"]["ifeval/*"] == "ifeval/step" and got["metrics"]["ifbench/*"] == "ifbench/step"
    assert got["metrics"]["ifbench_type/*"] == "ifbench/step"
    ifbench = [(r["ifbench/step"], r["ifbench/prompt_level_loose_acc"]) for r in got["history"]
               if "ifbench/prompt_level_loose_acc" in r]
    ifeval = [(r["ifeval/step"], r["ifeval/prompt_level_loose_acc"]) for r in got["history"]
              if "ifeval/prompt_level_loose_acc" in r]
    assert ifbench == [(20, 0.125), (40, 0.5)] and ifeval == [(20, 0.25)]
    assert not any("ifeval/step" in r and "ifbench/step" in r for r in got["history"])
    assert got["summary"]["ifbench/prompt_level_loose_acc"] == 0.5 and got["summary"]["ifbench/step"] == 40
    assert got["summary"]["ifeval/prompt_level_loose_acc"] == 0.25
    hard = [(r["hard/step"], r["hard/prompt_level_loose_acc"], r["hard_type/x:y/strict"]) for r in got["history"]
            if "hard/prompt_level_loose_acc" in r]
    assert hard == [(40, 0.75, 0.75)] and got["metrics"]["hard/*"] == "hard/step"
    assert got["summary"]["hard/prompt_level_loose_acc"] == 0.75


def test_sections_that_would_share_a_namespace_are_refused():
    assert namespaces({None: "lmeval", "lab": "lmeval", "ifbench": "ifbench"}) == {
        None: "lmeval", "lab": "lab", "ifbench": "ifbench"}
    with pytest.raises(ValueError, match="eval and evals.lmeval would both log W&B keys lmeval/"):
        namespaces({None: "lmeval", "lmeval": "lmeval"})
