"""Every key the sweep's W&B view reads is one a real run logs.

One job of the replay-sweep preset, narrowed to the tiny model (synthetic data with replay, 4 steps,
one checkpoint evaluated by the HF evaluator backend), logs to W&B offline; the run file is read back
(:mod:`ifdistill.wandb_offline`) and compared with :func:`ifdistill.wandb_view.view_spec` composed from
the same overrides: line-plot keys and their x axes in the history (IFEval keys declared on
``ifeval/step``), scatter and bar keys in the summary, grouping keys in the config with the job's values.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.ifeval.registry import INSTRUCTION_REGISTRY
from ifdistill.wandb_offline import find_run_dirs, read_run
from ifdistill.wandb_view import compose, metric_keys, sweep_group, view_spec

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
JOB = [
    "experiment=ifeval_replay_sweep", "model=tiny", "data=synthetic_replay", "peft=none", "trainer=cpu",
    "trainer.accelerator=cpu", "trainer.devices=1", "trainer.accumulate_grad_batches=1",
    "gradient_checkpointing=false", "logger=wandb", "method=sft", "seed=2", "data.ratio=0.05",
    "+data.sources.0.max_examples=32", "data.heldout=4", "data.max_length=256",
    "datamodule.micro_batch_size=4", "datamodule.val_batch_size=4", "trainer.max_steps=4",
    "trainer.log_every_n_steps=1", "run.eval_every_n_steps=4", "run.checkpoint_every_n_steps=4",
    "eval=synthetic", "eval.backend=hf", "eval.data.max_examples=4", "eval.generation.max_new_tokens=8",
    "eval.runtime.progress=false",
]


def test_the_view_reads_only_keys_a_tiny_sweep_job_logs(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="",
               TOKENIZERS_PARALLELISM="false")
    argv = [sys.executable, "-m", "ifdistill.train.cli", *JOB, f"paths.output_root={tmp_path}",
            f"hydra.run.dir={tmp_path}/job", f"hydra.sweep.dir={tmp_path}/sweep"]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    (run_dir,) = [p.parent for p in (tmp_path / "train" / "runs").glob("*/run.json")]
    (wb,) = [read_run(d) for d in find_run_dirs(run_dir / "logs")]
    assert wb["exit_code"] == 0

    overrides = [*JOB, f"paths.output_root={tmp_path}", f"hydra.sweep.dir={tmp_path}/sweep"]
    spec = view_spec(compose(overrides), group=sweep_group(compose(overrides), overrides))
    assert spec["group"] == wb["group"] == f"ifeval_replay_sweep-{(tmp_path / 'sweep').name}"
    keys = metric_keys(spec)
    logged = set().union(*wb["history"])
    per_type = {k for k in keys["summary"] if k.startswith("ifeval_type/")}
    assert keys["history"] <= logged, sorted(keys["history"] - logged)
    assert keys["summary"] - per_type <= set(wb["summary"]), sorted(keys["summary"] - per_type - set(wb["summary"]))
    # Per-type keys exist only for the types the evaluated prompts hold: matched by prefix and suffix,
    # and every per-type strict key the run logged is one the view's panel lists.
    logged_types = {k for k in wb["summary"] if k.startswith("ifeval_type/") and k.endswith("/strict_acc")}
    assert logged_types and logged_types <= per_type
    assert {k.split("/")[1] for k in logged_types} <= set(INSTRUCTION_REGISTRY)
    # x axes: IFEval rows carry ifeval/step and W&B plots ifeval/* against it; training rows the trainer step
    assert wb["metrics"]["ifeval/*"] == "ifeval/step"
    assert any("ifeval/prompt_level_strict_acc" in r and r.get("ifeval/step") == 4 for r in wb["history"])
    (scatter,) = [p for s in spec["sections"] for p in s["panels"] if p["type"] == "scatter"]
    assert scatter["x"] == "val/synthetic_train/acc"  # conf/data/synthetic.yaml's source
    assert any(scatter["x"] in r and "trainer/global_step" in r for r in wb["history"])
    # grouping: the swept values of this job, under the keys the view groups by
    assert keys["config"] == {"sweep/ratio", "sweep/method"}
    assert {k: wb["config"][k] for k in ("sweep/ratio", "sweep/method", "sweep/seed")} == \
        {"sweep/ratio": 0.05, "sweep/method": "sft", "sweep/seed": 2}
    assert spec["groupby"] == ["sweep/ratio", "sweep/method"]
