"""The train config groups: presets as published, typos caught at start-up, strategies chosen per device."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import ifdistill.conf  # noqa: F401  (the resolvers and section schemas the YAML under conf/ uses)
from ifdistill.config import ConfigError, validate
from ifdistill.runs.rundir import config_hash
from ifdistill.train import schemas  # noqa: F401  (registers the sections validate() checks)

CONF = Path(__file__).resolve().parents[3] / "conf"


def cfg_of(*overrides):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/x", *overrides])


def test_presets_match_the_published_setups():
    sft, dist = cfg_of("experiment=qwen3_ifeval_sft"), cfg_of("experiment=qwen3_ifeval_distill")
    for c in (sft, dist):
        assert c.model.name_or_path == "Qwen/Qwen3-1.7B" and c.trainer.devices == 2 and c.trainer.max_steps == 1000
        assert c.run.checkpoint_every_n_steps == 200 and c.run.keep_last_checkpoints >= 5
        assert c.data.sources[0].hf_name == "argilla/ifeval-like-data" and c.data.sources[0].verified_only
    assert dist.method.k == 4 and dist.method._target_.endswith("ICLDistillModule")
    assert dist.method.demos == "shared"  # per_example costs ~3x an SFT step (bench/bench_train.py)
    assert sft.method._target_.endswith("SFTModule")
    lora = cfg_of("experiment=qwen2.5_lora_sft")
    assert (lora.peft.method, lora.peft.r, lora.peft.alpha, lora.seed) == ("lora", 16, 32, 42)
    assert lora.model.name_or_path.startswith("Qwen/Qwen2.5-0.5B")


def test_typos_in_owned_sections_fail_at_start_up():
    validate(cfg_of("experiment=demo"))
    with pytest.raises(ConfigError, match="lrr"):
        validate(cfg_of("+optim.lrr=1"))
    with pytest.raises(ConfigError, match="eval_every"):
        validate(cfg_of("+run.eval_every=3"))


def test_config_hash_ignores_where_and_how_a_run_logs():
    base = config_hash(cfg_of("experiment=demo"))
    assert config_hash(cfg_of("experiment=demo", "paths.output_root=/elsewhere", "logger=wandb",
                              "run.eval_every_n_steps=7", "trainer.log_every_n_steps=1")) == base
    assert config_hash(cfg_of("experiment=demo", "optim.lr=0.5")) != base
    assert config_hash(cfg_of("experiment=demo", "trainer=ddp")) != base


def test_strategy_factories_pick_the_cpu_variant_only_on_cpu():
    from lightning.pytorch.strategies import DeepSpeedStrategy, ModelParallelStrategy

    from ifdistill.train.deepspeed_cpu import CPUDeepSpeedStrategy
    from ifdistill.train.strategies import ddp, deepspeed_strategy, fsdp2

    cpu = deepspeed_strategy(3, "cpu", offload_optimizer="cpu", zero={"stage3_param_persistence_threshold": 0})
    assert isinstance(cpu, CPUDeepSpeedStrategy) and cpu._process_group_backend == "gloo"
    assert cpu.config["zero_optimization"]["stage3_param_persistence_threshold"] == 0
    assert cpu.config["zero_force_ds_cpu_optimizer"] is False
    gpu = deepspeed_strategy(2, "gpu")
    assert type(gpu) is DeepSpeedStrategy  # Lightning's own class on GPUs
    with pytest.raises(ValueError, match="stage 3"):
        deepspeed_strategy(2, "cpu", offload_parameters="cpu")
    f = fsdp2(devices=2, num_nodes=2, accelerator="cpu")
    assert isinstance(f, ModelParallelStrategy) and f._data_parallel_size == 4 and f._tensor_parallel_size == 1
    assert ddp("cpu")._process_group_backend == "gloo"
