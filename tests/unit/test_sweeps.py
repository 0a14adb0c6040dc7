"""Sweep naming, the replay-sweep preset's composition, and the multirun + multi-device guard."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

import ifdistill.config  # noqa: F401  (registers the resolvers the configs use)
from ifdistill.runs.sweeps import sweep_name
from ifdistill.runs.sweeps import check_launch

CONF = Path(__file__).resolve().parents[2] / "conf"


def _compose(overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=["paths.output_dir=/tmp/ifdistill-sweep-test", *overrides],
                      return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def test_names_use_the_swept_keys_in_their_order():
    params = {"data.ratio": "0,0.5", "method": "sft,distill", "seed": "1,2"}
    assert sweep_name(["seed=2", "model=tiny", "method=distill", "data.ratio=0.05"], params) == \
        "ratio-0.05_method-distill_seed-2"


def test_ad_hoc_sweeps_use_every_override_but_paths_and_hydra_and_stay_short():
    assert sweep_name(["optim.lr=1e-4", "paths.output_root=/x", "experiment=demo", "model=a/b"]) == \
        "model-a-b_lr-1e-4"
    long = sweep_name([f"key{i}=value{i}" for i in range(40)])
    assert len(long) <= 120 and long != sweep_name([f"key{i}=value{i}" for i in range(41)])


def test_replay_sweep_preset_spans_24_distinct_runs_in_one_group():
    master = cfg = _compose(["experiment=ifeval_replay_sweep", "hydra/launcher=slurm"])
    params = {k: str(v).split(",") for k, v in cfg.hydra.sweeper.params.items()}
    assert params == {"data.ratio": ["0", "0.05", "0.18", "0.5"], "method": ["sft", "distill"],
                      "seed": ["1", "2", "3"]}
    # The slurm launcher takes one task (and GPU) per trainer device from the preset's trainer.
    assert (cfg.hydra.launcher.tasks_per_node, cfg.hydra.launcher.gpus_per_node) == (2, 2)
    str(master.hydra.sweep.dir)  # the sweeper resolves (and so caches) it before composing the jobs
    names, groups = set(), set()
    for combo in itertools.product(*params.values()):
        job = [f"{k}={v}" for k, v in zip(params, combo)]
        cfg = _compose(["experiment=ifeval_replay_sweep", *job])
        OmegaConf.copy_cache(from_config=master, to_config=cfg)  # what Hydra does per job: one ${now:...}
        assert cfg.method._target_.endswith("ICLDistillModule" if "method=distill" in job else "SFTModule")
        assert cfg.data.ratio == float(combo[0]) and cfg.data.replay[0].hf_config == "smol-constraints"
        names.add(cfg.run.name)
        groups.add(cfg.run.group)
    assert len(names) == 24 and "ratio-0.18_method-distill_seed-3" in names
    assert len(groups) == 1 and next(iter(groups)).startswith("ifeval_replay_sweep-")


@pytest.mark.parametrize("devices,launcher,refused", [(2, "local", True), (1, "local", False), (2, "slurm", False)])
def test_multirun_refuses_lightning_launched_ranks_on_the_local_launcher(devices, launcher, refused):
    cfg = _compose([f"hydra/launcher={launcher}", f"trainer.devices={devices}", "hydra.mode=MULTIRUN"])
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    if refused:
        with pytest.raises(ValueError, match="re-run the whole sweep"):
            check_launch(cfg.trainer)
    else:
        check_launch(cfg.trainer)
