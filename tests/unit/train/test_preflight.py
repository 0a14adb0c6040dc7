"""Every mistake that shows without a model is reported before anything loads or is written: one line
naming the key (or file, row and field), from the real config groups and the real data loaders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import ifdistill.conf  # noqa: F401  (the resolvers and section schemas the YAML under conf/ uses)
from ifdistill.train.config_edge import train_config
from ifdistill.train.preflight import PreflightError

ROOT = Path(__file__).resolve().parents[3]


def cfg_of(*overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/x", *overrides])


def test_the_shipped_presets_pass():
    for preset in ("experiment=demo", "experiment=demo_smollm2", "method=distill", "callbacks=checkpoint_eval", "callbacks=checkpoint_eval_ifbench",
                   "trainer=ddp", "method=onpolicy_distill"):
        train_config(cfg_of(preset), check_model=False)


def test_a_method_checks_its_section_in_preflight():
    """method=onpolicy_distill's own checks (ifdistill.train.method) run before a model loads."""
    with pytest.raises(PreflightError, match="DeepSpeed partitions"):
        train_config(cfg_of("method=onpolicy_distill", "trainer=deepspeed_stage_2"), check_model=False)


def test_a_top_level_section_is_accepted_for_the_method_that_reads_it():
    """``teacher_pass`` is off-policy distillation's section (MethodHooks.sections), a typo elsewhere."""
    train_config(cfg_of("method=distill", "method.teacher_source=cache", "method.demos=per_example",
                     "+teacher_pass.only=true"), check_model=False)
    with pytest.raises(PreflightError, match="unknown top-level key teacher_pass"):
        train_config(cfg_of("+teacher_pass.only=true"), check_model=False)


@pytest.mark.parametrize("override, names", [
    ("data.ratio=1.5", "data.ratio=1.5 must be a number in [0, 1)"),
    ("data.ratio=-0.1", "data.ratio=-0.1"),
    ("optim.lr=-1e-3", "optim.lr=-0.001 must be a number > 0"),
    ("optim.lr=0", "optim.lr=0"),
    ("trainer.max_steps=0", "trainer.max_steps=0 must be an integer >= 1"),
    ("trainer.devices=0", "trainer.devices=0"),
    ("datamodule.micro_batch_size=0", "datamodule.micro_batch_size=0"),
    ("trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches=0"),
    ("run.keep_last_checkpoints=0", "run.keep_last_checkpoints=0"),
    ("+trainer.max_stepz=5", "trainer: unknown key max_stepz for lightning.pytorch.Trainer"),
    ("+method.kd_ratioo=1", "method: unknown key kd_ratioo"),
    ("+optim.lrr=1", "lrr"),
    ("+lr=1e-3", "unknown top-level key lr"),
    ("data.sources=[]", "data.sources is empty"),
    ("+data.sauces=1", "unknown keys ['sauces']"),
    ("data.enable_thinking=true", "data.enable_thinking=True but model.enable_thinking=None"),
    ("run.on_nonfinite=ignore", "run.on_nonfinite='ignore' must be stop or skip"),
    ("run.max_skipped_steps=-1", "run.max_skipped_steps=-1 must be an integer >= 0"),
    ("run.resume_from=/nonexistent/run", "run.resume_from: /nonexistent/run is not a run directory"),
])
def test_each_bad_value_is_named(override, names):
    with pytest.raises(PreflightError) as err:
        train_config(cfg_of(override), check_model=False)
    assert names in str(err.value) and "\n" not in str(err.value)


def test_a_value_of_the_wrong_type_is_refused_as_the_config_composes():
    """``optim.lr`` is typed by its schema (Hydra's ``schema/optim``): composition refuses ``fast`` naming the key,
    before preflight (the command prints it as one line: tests/unit/test_command_line.py)."""
    with pytest.raises(Exception, match="optim.lr"):
        cfg_of("optim.lr=fast")


def test_skipping_non_finite_steps_is_refused_under_deepspeed():
    train_config(cfg_of("trainer=ddp", "run.on_nonfinite=skip"), check_model=False)
    with pytest.raises(PreflightError, match="run.on_nonfinite=skip is not available with DeepSpeed"):
        train_config(cfg_of("trainer=deepspeed_stage_2", "run.on_nonfinite=skip"), check_model=False)


def test_an_extra_benchmark_is_checked_like_the_eval_section():
    bad = cfg_of("callbacks=checkpoint_eval_ifbench", "callbacks.checkpoint_eval.evals.ifbench.backend=onnx")
    with pytest.raises(PreflightError) as err:
        train_config(bad, check_model=False)
    assert "callbacks.checkpoint_eval.evals.ifbench: " in str(err.value) and "onnx" in str(err.value)
    clash = cfg_of("callbacks=checkpoint_eval", "+eval@callbacks.checkpoint_eval.evals.ifeval=ifeval_local")
    with pytest.raises(PreflightError, match="eval and evals.ifeval would both log W&B keys ifeval/"):
        train_config(clash, check_model=False)


def test_several_problems_are_reported_together():
    with pytest.raises(PreflightError) as err:
        train_config(cfg_of("data.ratio=1.5", "optim.lr=-1"), check_model=False)
    assert "data.ratio" in str(err.value) and "optim.lr" in str(err.value)


def _local_source(path: Path) -> list[str]:
    return ["data.sources.0.synthetic=null", f"+data.sources.0.path={path}", "data.heldout=0"]


def test_data_files_are_checked_by_the_loader_training_uses(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"prompt": "Say hi.", "completion": "hi"}) + "\n")
    train_config(cfg_of(*_local_source(good)), check_model=False)
    with pytest.raises(PreflightError, match=f"no data file at {tmp_path}/missing.jsonl"):
        train_config(cfg_of(*_local_source(tmp_path / "missing.jsonl")), check_model=False)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + json.dumps({"prompt": 3, "completion": "x"}) + "\n")
    with pytest.raises(PreflightError, match=rf"{bad}:2: field 'prompt': .* \[wrong_type\]"):
        train_config(cfg_of(*_local_source(bad)), check_model=False)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(good.read_text() + '{"prompt": "x", \n')
    with pytest.raises(PreflightError, match=rf"{broken}:2: not valid JSON"):
        train_config(cfg_of(*_local_source(broken)), check_model=False)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(PreflightError, match=f"{empty} holds no rows"):
        train_config(cfg_of(*_local_source(empty)), check_model=False)


def test_train_refuses_before_creating_the_run_directory(tmp_path):
    from ifdistill.train.run import train

    cfg = cfg_of("data.ratio=1.5", f"paths.output_root={tmp_path}")
    with pytest.raises(PreflightError):
        train(train_config(cfg))
    assert list(tmp_path.iterdir()) == []


def _cli(tmp_path: Path, *overrides: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ifdistill.cli.train", f"paths.output_root={tmp_path}/out",
                           f"hydra.run.dir={tmp_path}/hydra", *overrides], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    return proc, time.monotonic() - t0


def test_cli_prints_one_line_exits_2_and_leaves_no_run_directory(tmp_path):
    proc, _ = _cli(tmp_path, "data.ratio=1.5")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "ifdistill-train: error: data.ratio=1.5 must be a number in [0, 1)"
    assert "Traceback" not in proc.stdout + proc.stderr and not (tmp_path / "out").exists()
    full, _ = _cli(tmp_path, "trainer.max_steps=0", HYDRA_FULL_ERROR="1")
    assert full.returncode != 0 and "Traceback" in full.stderr and "trainer.max_steps=0" in full.stderr


def test_a_hub_model_that_is_not_here_names_the_model_and_the_local_path_way_out(tmp_path):
    proc, _ = _cli(tmp_path, "model=qwen3_1.7b", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip()
    assert "\n" not in line and "'Qwen/Qwen3-1.7B'" in line and "model.name_or_path=/path" in line
    assert not (tmp_path / "out").exists()
