"""Training on tiny_qwen3 (Qwen3's real tokenizer, template and architecture): SFT and ICL distillation,
LoRA and full fine-tuning, through ``train()`` as the CLI runs it.

What Qwen3 changes for training and is exercised here: the loss mask under a template that renders
the final turn with a think block (the empty block is prompt, ``enable_thinking=False``), the teacher's
k-shot view with demonstrations as earlier turns (which the template renders without think blocks),
q/k norms in the LoRA and full-weight backward, and a 151,936-row tied embedding. Each run is short (4
steps); it must train (finite losses, parameters moved where they should) and leave a checkpoint.
"""

from __future__ import annotations

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
STEPS = 4


def _cfg(tmp_path: Path, method: str, peft: str):
    GlobalHydra.instance().clear()
    extra = ["method.k=2"] if method == "distill" else []
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[
            "model=tiny_qwen3", "data=synthetic", f"method={method}", f"peft={peft}", "trainer=cpu", "logger=csv",
            *extra, "peft.r=4" if peft == "lora" else "peft=none",
            "+data.sources.0.max_examples=24", "data.heldout=8", "data.max_length=512",
            "datamodule.micro_batch_size=2", "datamodule.val_batch_size=4", f"trainer.max_steps={STEPS}",
            "trainer.log_every_n_steps=1", "optim.lr=1e-3", "optim.schedule=constant",
            f"run.eval_every_n_steps={STEPS}", f"run.checkpoint_every_n_steps={STEPS}",
            f"paths.output_root={tmp_path}", f"paths.output_dir={tmp_path}/hydra"])


# SFT with LoRA on tiny_qwen3 runs in tests/integration/callbacks (training + callback + post-training eval).
@pytest.mark.parametrize("method,peft", [("sft", "none"), ("distill", "lora"), ("distill", "none")])
def test_trains_on_tiny_qwen3(tmp_path, method, peft):
    torch.set_num_threads(1)  # a shared 2-core machine: one thread is faster than two contending ones
    out = train(train_config(_cfg(tmp_path, method, peft)))
    assert out["global_step"] == STEPS
    losses = {k: v for k, v in out["metrics"].items() if "loss" in k or k.endswith("/ce")}
    assert losses and all(math.isfinite(v) for v in losses.values()), out["metrics"]
    ckpt = Path(out["run_dir"]) / "checkpoints" / f"step={STEPS:06d}.ckpt"
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    if peft == "lora":  # lora_B starts at zero: a non-zero one has been trained
        assert any(state[k].abs().max() > 0 for k in state if "lora_B" in k)
    else:  # Qwen3's q/k RMSNorm weights start at one and train with the rest
        norms = [k for k in state if k.endswith(("q_norm.weight", "k_norm.weight"))]
        assert norms and any((state[k] != 1).any() for k in norms)
        assert any(k.endswith("embed_tokens.weight") and state[k].shape[0] == 151936 for k in state)
