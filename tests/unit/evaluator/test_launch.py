"""The callback-facing command builder: environment cleaning, the request config, and that the real
``ifdistill-eval`` program composes exactly the section it was given (checked with ``--cfg job``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ifdistill.evaluator.launch import clean_environment, evaluator_command, request_eval_section
from ifdistill.evaluator.settings import as_dict, eval_settings
from tests.support import eval_section

TRAINER_ENV = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1",
               "MASTER_PORT": "29500", "GROUP_RANK": "0", "TORCHELASTIC_RUN_ID": "x", "SLURM_STEP_ID": "0",
               "SLURM_STEP_NODELIST": "n1", "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_CPU_BIND": "mask",
               "PL_GLOBAL_SEED": "0", "OMP_NUM_THREADS": "1", "SLURM_JOB_ID": "42", "PATH": "/usr/bin", "HOME": "/h"}


def test_clean_environment_removes_the_trainers_distributed_variables():
    env = clean_environment(dict(TRAINER_ENV))
    assert env == {"SLURM_JOB_ID": "42", "PATH": "/usr/bin", "HOME": "/h", "OMP_NUM_THREADS": "1"}
    assert "OMP_NUM_THREADS" not in clean_environment(dict(TRAINER_ENV), drop_thread_vars=True)


@pytest.fixture()
def trainer_cfg(tmp_path):
    """The eval section as a training run's callback receives it: the eval group interpolates the run's model
    section, resolved."""
    return eval_section(["model=qwen3_1.7b", "eval=ifeval_local", "eval.generation.max_new_tokens=64"], tmp_path / "run")


def test_command_and_environment(trainer_cfg, tmp_path):
    export = tmp_path / "run" / "exports" / "step_000200"
    export.mkdir(parents=True)
    (export / "export.json").write_text('{"base_model": "Qwen/Qwen3-1.7B"}')
    out = tmp_path / "run" / "evals" / "step_000200"
    argv, env = evaluator_command(trainer_cfg, export, out, kind="adapter",
                                  devices={"cuda_visible_devices": "1", "cpu_threads_bind": "1"},
                                  base_env=TRAINER_ENV)
    assert argv[:3] == [sys.executable, "-m", "ifdistill.evaluator.cli"]
    assert f"--config-dir={out / '.request'}" in argv and "eval=_request" in argv
    assert f"export_dir='{export}'" in argv and "export_kind=adapter" in argv
    assert f"output_dir='{out}'" in argv and "model.name_or_path='Qwen/Qwen3-1.7B'" in argv
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_STEP_ID", "SLURM_PROCID",
                 "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS"):
        assert name not in env, name
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and env["SLURM_JOB_ID"] == "42" and env["PATH"] == "/usr/bin"
    request = yaml.safe_load((out / ".request" / "eval" / "_request.yaml").read_text())
    assert request["dtype"] == "bfloat16" and request["generation"]["enable_thinking"] is False  # the run's model
    assert request["generation"]["max_new_tokens"] == 64
    assert request["runtime"]["cpu_threads_bind"] == "1" and request["runtime"]["cuda_visible_devices"] == "1"
    assert Path(request["data"]["path"]).is_absolute()


def test_devices_must_be_runtime_keys(trainer_cfg):
    with pytest.raises(ValueError, match="gpu"):
        request_eval_section(trainer_cfg, {"gpu": 1})


def test_the_evaluator_program_composes_the_requested_section(trainer_cfg, tmp_path):
    """Run the real entry point with ``--cfg job`` from another directory: no model is loaded."""
    export, out = tmp_path / "export", tmp_path / "out dir, with = signs"
    export.mkdir()
    argv, env = evaluator_command(trainer_cfg, export, out, devices={"cpu_threads_bind": "1"})
    env["IFDISTILL_SHARED_DATA"] = str(Path(trainer_cfg["data"]["path"]).parent.parent.absolute())
    done = subprocess.run([*argv, "--cfg", "job", "--resolve"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    composed = yaml.safe_load(done.stdout)
    expected = as_dict(eval_settings(request_eval_section(trainer_cfg, {"cpu_threads_bind": "1"})))
    assert as_dict(eval_settings(composed["eval"])) == expected
    assert composed["export_dir"] == str(export) and composed["output_dir"] == str(out)


def test_the_console_script_works_from_another_directory(tmp_path):
    script = Path(sys.executable).parent / "ifdistill-eval"
    assert script.is_file(), "the package is not installed in this environment"
    env = {k: v for k, v in os.environ.items()}
    done = subprocess.run([str(script), "eval=synthetic", "eval.generation.max_new_tokens=9", "--cfg", "job"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cfg = yaml.safe_load(done.stdout)
    assert cfg["eval"]["name"] == "synthetic" and cfg["eval"]["generation"]["max_new_tokens"] == 9


def test_an_evaluator_keeps_the_users_thread_counts_not_a_ddp_ranks(tmp_path):
    """``ifdistill-train`` records the thread counts of its own command before Lightning's DDP sets
    OMP_NUM_THREADS for its ranks: the evaluators it starts get the user's, and none when the user gave none."""
    from ifdistill.evaluator.launch import LAUNCH_THREADS_ENV, record_launch_threads

    section = eval_section(["eval=synthetic"], tmp_path)
    for user, expected in (({"OMP_NUM_THREADS": "1"}, "1"), ({}, None)):
        env = {"PATH": "/usr/bin", **user}
        record_launch_threads(env)
        env["OMP_NUM_THREADS"] = "3"  # what DDP sets later, after the record
        record_launch_threads(env)  # a rank's own start: the first record stays
        _, child = evaluator_command(section, tmp_path / "export", tmp_path / "out", base_env=env)
        assert child.get("OMP_NUM_THREADS") == expected and LAUNCH_THREADS_ENV in child
