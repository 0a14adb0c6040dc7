"""A composition mistake on ifdistill-train's command line is one line and exit 2, before Hydra or a run
directory exists; a sweep's other values are composed too (ifdistill/command_line.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.command_line import jobs_to_check

TRAIN = Path(sys.executable).parent / "ifdistill-train"


def test_a_sweep_is_checked_by_its_first_job_and_each_other_value_once():
    argv = ["-m", "method=sft,distill", "data.replay_ratio=0,0.5", "seed=1"]
    assert jobs_to_check(argv) == [
        ["method=sft", "data.replay_ratio=0", "seed=1"],
        ["method=distill", "data.replay_ratio=0", "seed=1"],
        ["method=sft", "data.replay_ratio=0.5", "seed=1"],
    ]
    assert jobs_to_check(["method=sft", "+method.kd_ratio=0.5"]) == [["method=sft", "+method.kd_ratio=0.5"]]
    assert jobs_to_check(["--cfg", "job"]) == []  # Hydra's own flags are Hydra's


@pytest.mark.parametrize("argv, says", [
    (["method=sftt"], "Could not find 'method/sftt'"),
    (["-m", "method=sft,sftt"], "Could not find 'method/sftt'"),
    (["nosuchkey=1"], "Key 'nosuchkey' is not in struct"),
    (["model.nosuch=1"], "Could not override 'model.nosuch'"),
    (["optim.lr=fast"], "optim.lr"),  # typed by its schema (Hydra's schema/optim) as the config composes
    # a closed target node (ifdistill/train/strategy_settings.py): its factory's **kwargs go to Lightning unchecked
    (["trainer=deepspeed_stage_2", "trainer.strategy.offload_optimiser=cpu"],
     "Could not override 'trainer.strategy.offload_optimiser'"),
    (["method=distill", "method.kd_ratio=high"], "method.kd_ratio"),  # typed by DistillSettings
])
def test_a_composition_mistake_is_one_line_exit_2_and_creates_nothing(tmp_path, argv, says):
    done = subprocess.run([str(TRAIN), *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("ifdistill-train: error: ") and says in done.stderr
    assert list(tmp_path.iterdir()) == []  # no Hydra job folder, no run directory


def test_an_option_that_does_not_exist_is_answered_with_the_ones_that_do():
    """``method=sftt``: the line lists the group's options as conf/ holds them (shared bases left out)."""
    from ifdistill.command_line import compose, one_line

    conf = Path(__file__).resolve().parents[2] / "conf"
    for group, wrong in (("method", "sftt"), ("eval", "ifevl")):
        with pytest.raises(Exception) as err:
            compose("train", [f"{group}={wrong}"])
        options = sorted(p.stem for p in (conf / group).glob("*.yaml") if not p.stem.startswith("_"))
        assert one_line(err.value).endswith(f"Could not find '{group}/{wrong}' (known: {', '.join(options)})")
