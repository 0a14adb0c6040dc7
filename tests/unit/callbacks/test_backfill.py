"""Back-fill verifies an export's weight files against export.json before it starts an evaluator."""

from __future__ import annotations

import json
import shutil

from omegaconf import OmegaConf

from ifdistill.callbacks.backfill import backfill
from ifdistill.hashing import weight_hashes
from ifdistill.evaluator.cli import compose_config
from ifdistill.results import run_metrics
from tests.support import flip_bytes


def test_a_corrupt_export_is_recorded_as_a_failure_and_not_evaluated(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    export = run / "exports" / "step_000010"
    shutil.copytree(tiny_model_dir, export / "model")
    (export / "export.json").write_text(json.dumps({"step": 10, "kinds": ["model"], "base_model": "builtin:tiny",
                                                    "weights": weight_hashes(export, recursive=True)}))
    # the run's config as a training run stores it: a small HF-backend evaluation of the tiny model
    cfg = compose_config(["eval=ifeval_local", "eval.backend=hf", "eval.data.max_examples=2",
                          "eval.generation.max_new_tokens=2", "eval.runtime.progress=false"], output_dir=str(run))
    OmegaConf.save(OmegaConf.create({"eval": OmegaConf.to_container(cfg.eval, resolve=True),
                                     "model": OmegaConf.to_container(cfg.model, resolve=True)}), run / "config.yaml")
    flip_bytes(export / "model" / "model.safetensors")
    outcome = backfill(run, log=False, timeout_s=300)
    bad = str(export / "model" / "model.safetensors")
    assert outcome[10].startswith(f"{bad}: sha256"), outcome
    failures = run_metrics.read(run)["failures"]
    assert len(failures) == 1 and failures[0]["step"] == 10 and bad in failures[0]["reason"]
    assert not (run / "evals" / "step_000010" / "results.json").exists()
    assert not (run / "evals" / "step_000010.backfill.log").exists()  # no evaluator was started
