"""A 20-step on-policy ICL distillation run through ``train()`` as the CLI runs it, with HF generation:
LoRA, an EMA teacher, 2 accumulated micro-batches (the token normalisation after sampling), the sample
monitoring logged like every training metric."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import ifdistill.conf  # noqa: F401  (the resolvers and section schemas the YAML under conf/ uses)
from ifdistill.train.config_edge import train_config
from ifdistill.train.run import train

pytestmark = pytest.mark.slow

CONF = Path(__file__).resolve().parents[3] / "conf"
STEPS, BUDGET = 20, 8


def test_twenty_onpolicy_steps_with_hf_generation(tmp_path):
    torch.set_num_threads(1)  # a shared 2-core machine: one thread is faster than two contending ones
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[
            "model=tiny", "data=synthetic", "method=onpolicy_distill", "method.k=2", "method.lmbda=0.5",
            "method.teacher=ema", f"method.generation.max_new_tokens={BUDGET}", "method.sample_table_every=5",
            "peft=lora", "peft.r=4", "trainer=cpu", "logger=csv", "trainer.accumulate_grad_batches=2",
            "+data.sources.0.max_examples=48", "data.heldout=4", "data.max_length=384",
            "datamodule.micro_batch_size=2", "datamodule.val_batch_size=4", f"trainer.max_steps={STEPS}",
            "trainer.log_every_n_steps=5", "optim.lr=1e-3", f"run.eval_every_n_steps={STEPS}",
            f"run.checkpoint_every_n_steps={STEPS}", "run.validate_at_start=false",
            f"paths.output_root={tmp_path}", f"paths.output_dir={tmp_path}/hydra"])
    out = train(train_config(cfg))
    assert out["global_step"] == STEPS
    rows = list(csv.DictReader(next(Path(out["run_dir"]).rglob("metrics.csv")).open()))
    logged = [r for r in rows if r.get("onpolicy/sampled_len")]
    assert len(logged) == STEPS // 5  # every logging interval
    for r in logged:
        length, eos, hit = (float(r[k]) for k in ("onpolicy/sampled_len", "onpolicy/eos_rate",
                                                  "onpolicy/budget_hit_rate"))
        assert 1 <= length <= BUDGET and 0 <= eos <= 1 and eos + hit == pytest.approx(1.0)
        assert all(math.isfinite(float(r[k])) for k in ("train/loss", "train/kd", "train/entropy", "teacher/entropy"))
    state = torch.load(Path(out["run_dir"]) / "checkpoints" / f"step={STEPS:06d}.ckpt", map_location="cpu",
                       weights_only=False)
    ema, live = state["ema_teacher"], state["state_dict"]
    lora_b = [k for k in ema if "lora_B" in k]
    assert lora_b and all(ema[k].abs().max() > 0 for k in lora_b)  # the EMA followed the trained adapter
    assert any(not torch.equal(ema[k], live["lm." + k]) for k in lora_b)  # ... and lags it
