"""Back-fill verifies an export's weight files against export.json before it starts an evaluator, and adds a
benchmark the run never evaluated."""

from __future__ import annotations

import json
import shutil

import pytest

from omegaconf import OmegaConf

from ifdistill.callbacks.backfill import backfill
from ifdistill.hashing import weight_hashes
from ifdistill.evaluator.cli import compose_config
from ifdistill.results import run_metrics
from tests.support import flip_bytes


def _run_with_export(tiny_model_dir, tmp_path) -> tuple:
    """A run directory with one export of the tiny model (step 10) and the run's config as training stores it
    (a small HF-backend evaluation of the tiny model, resolved, with the run's model and paths)."""
    run = tmp_path / "run"
    export = run / "exports" / "step_000010"
    shutil.copytree(tiny_model_dir, export / "model")
    (export / "export.json").write_text(json.dumps({"step": 10, "kinds": ["model"], "base_model": "builtin:tiny",
                                                    "weights": weight_hashes(export, recursive=True)}))
    cfg = compose_config(["eval=ifeval_local", "eval.backend=hf", "eval.data.max_examples=2",
                          "eval.generation.max_new_tokens=2", "eval.runtime.progress=false"], output_dir=str(run))
    OmegaConf.save(OmegaConf.create({k: OmegaConf.to_container(cfg[k], resolve=True) for k in ("eval", "model", "paths")}),
                   run / "config.yaml")
    return run, export


def test_a_corrupt_export_is_recorded_as_a_failure_and_not_evaluated(tiny_model_dir, tmp_path):
    run, export = _run_with_export(tiny_model_dir, tmp_path)
    flip_bytes(export / "model" / "model.safetensors")
    outcome = backfill(run, log=False, timeout_s=300)
    bad = str(export / "model" / "model.safetensors")
    assert outcome[10].startswith(f"{bad}: sha256"), outcome
    failures = run_metrics.read(run)["failures"]
    assert len(failures) == 1 and failures[0]["step"] == 10 and bad in failures[0]["reason"]
    assert not (run / "evals" / "step_000010" / "results.json").exists()
    assert not (run / "evals" / "step_000010.backfill.log").exists()  # no evaluator was started


@pytest.mark.slow  # an evaluator process (~20 s)
def test_a_benchmark_the_run_never_evaluated_is_backfilled_at_every_export(tiny_model_dir, tmp_path, capsys):
    """``+eval@evals.extra=ifbench_local``: only the new benchmark is evaluated (the run's own result stays),
    with the run's model, into evals/extra/step_X and metrics.json's evals/extra."""
    from ifdistill.callbacks.backfill import main
    from ifdistill.evaluator.output import read_results_json

    run, _ = _run_with_export(tiny_model_dir, tmp_path)  # finished, its own evaluation of step 10 recorded
    (run / "run.json").write_text(json.dumps({"run_id": "r", "launches": [{"pid": None, "finished": "t"}]}))
    run_metrics.record_checkpoint(run, 10, {"metrics": {"prompt_level_strict_acc": 0.5}}, "evals/step_000010",
                                  "callback")
    assert main([f"run_dir={run}", "+eval@evals.extra=nosuch", "log=false"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    extra = ["+eval@evals.extra=ifbench_local", "evals.extra.backend=hf", "evals.extra.data.max_examples=2",
             "evals.extra.generation.max_new_tokens=2", "evals.extra.runtime.progress=false"]
    assert main([f"run_dir={run}", *extra, "log=false", "runner=local"]) == 0
    recorded = run_metrics.read(run)
    assert recorded["checkpoints"]["10"]["source"] == "callback"  # untouched
    entry = recorded["evals"]["extra"]["10"]
    assert entry["benchmark"] == "ifbench" and entry["source"] == "backfill"
    results = read_results_json(run / "evals" / "extra" / "step_000010")
    assert results["config"]["eval"]["benchmark"] == "ifbench" and results["model"]["export_dir"] is not None
    assert entry["eval_config_hash"] == results["eval_config_hash"] and entry["metrics"] == results["metrics"]
