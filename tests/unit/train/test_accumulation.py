"""Gradient accumulation 2 x 4 equals batch 8: the loss is normalised by the tokens of the whole step.

A per-micro-batch mean would weight the two halves equally whatever their token counts, and the
accumulated step would differ from the batch-8 step. Runs the real Lightning loop in one process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import Logger

from ifdistill.train.datamodule import TrainDataModule
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train.method import TrainingInputs

from tests.support import adam_weight_tolerance, sgd_weight_tolerance, sum_relative_error
from tests.unit.train.conftest import LORA, TINY, perturb_lora, resolved, synthetic_data

ROOT = Path(__file__).resolve().parents[3]
SGD = {"name": "sgd", "lr": 0.5, "schedule": "constant"}


class Recorder(Logger):
    """Keeps every logged row in memory."""

    def __init__(self):
        super().__init__()
        self.rows: list[tuple[int, dict]] = []

    name = property(lambda self: "recorder")
    version = property(lambda self: 0)

    def log_metrics(self, metrics, step=None):
        self.rows.append((step, dict(metrics)))

    def log_hyperparams(self, params, *args, **kwargs):
        pass


def fit(micro_batch_size: int, accumulate: int, optim: dict, steps: int = 2, strategy="auto"):
    dm = TrainDataModule(resolved(synthetic_data(40)), TINY, micro_batch_size=micro_batch_size)
    torch.manual_seed(0)  # the LoRA A matrices are drawn at construction
    module = SFTModule(TrainingInputs(TINY, LORA, optim))
    perturb_lora(module)  # lora_B != 0 so that every LoRA matrix gets a gradient from step 1
    start = {n: p.detach().clone() for n, p in module.lm.named_parameters() if p.requires_grad}
    recorder = Recorder()
    trainer = pl.Trainer(accelerator="cpu", devices=1, strategy=strategy, max_steps=steps, accumulate_grad_batches=accumulate,
                         log_every_n_steps=1,
                         logger=recorder, enable_checkpointing=False, use_distributed_sampler=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0)
    trainer.fit(module, datamodule=dm)
    losses = [m["train/loss"] for _, m in recorder.rows if "train/loss" in m]
    tokens = [m["train/tokens"] for _, m in recorder.rows if "train/tokens" in m]
    weights = {n: p.detach().clone() for n, p in module.lm.named_parameters() if p.requires_grad}
    fit.start = start  # the weights before the first step (the same for every call)
    return losses, tokens, weights


def sgd_tolerance(weights: dict, tokens: list[float]) -> float:
    """:func:`~tests.support.sgd_weight_tolerance` of a run of :func:`fit` with plain SGD: its largest
    movement and weight, its step count, and the tokens of its largest step (the terms each gradient
    sums)."""
    movement = max((weights[n] - fit.start[n]).abs().max().item() for n in weights)
    weight_max = max(w.abs().max().item() for w in weights.values())
    return sgd_weight_tolerance(movement, weight_max, len(tokens), max(tokens))


@pytest.mark.parametrize("optim", [SGD, {"name": "adamw", "lr": 1e-4, "schedule": "constant"}], ids=["sgd", "adamw"])
def test_accumulating_2x4_equals_batch_8(optim):
    loss_acc, tok_acc, w_acc = fit(4, 2, optim)
    loss_big, tok_big, w_big = fit(8, 1, optim)
    assert tok_acc == tok_big and len(loss_acc) == 2  # the same examples in each step
    # the step's loss is a token sum over two halves instead of one: float32 summation order only
    assert loss_acc == pytest.approx(loss_big, rel=sum_relative_error(max(tok_big)))
    diff = max((w_acc[n] - w_big[n]).abs().max().item() for n in w_acc)
    if optim["name"] == "sgd":
        # movement 4.5e-2, 2 steps of ~900 tokens: tol 3.5e-7 (measured diff 1.5e-8, one ulp
        # of the weights); a per-micro-batch mean or a lost half of the gradient is off by ~1e-2
        tol = sgd_tolerance(w_big, tok_big)
    else:
        # 1 % of lr * steps = 2e-6 (measured 1.3e-7); a per-micro-batch mean moves updates by O(lr)
        tol = adam_weight_tolerance(optim["lr"], len(tok_big))
    assert diff <= tol, f"max |w_2x4 - w_8| = {diff:.3g}, tolerance {tol:.3g}"


def _deepspeed_fit(out: str) -> None:
    """Entry point of the fresh process below: 2 x 4 accumulated under DeepSpeed ZeRO-2 (one CPU rank)."""
    from ifdistill.train.strategies import deepspeed_strategy

    _, _, weights = fit(4, 2, SGD, strategy=deepspeed_strategy(2, accelerator="cpu"))
    torch.save(weights, out)


def test_deepspeed_accumulation_2x4_equals_batch_8(tmp_path):
    """DeepSpeed's ``engine.backward`` divides by its accumulation steps on top of Lightning's division;
    ``SFTModule._backward_scale`` multiplies that back. Plain SGD, because Adam would hide a constant
    gradient factor (a missing compensation halves the gradient here: weights off by ~3e-2). One rank
    in a fresh process (DeepSpeed leaves its process group behind), overlapped with the reference."""
    out, log = tmp_path / "weights.pt", tmp_path / "deepspeed.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT), DS_ACCELERATOR="cpu", CUDA_VISIBLE_DEVICES="",
               TOKENIZERS_PARALLELISM="false")
    code = f"from tests.unit.train.test_accumulation import _deepspeed_fit; _deepspeed_fit({str(out)!r})"
    with log.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
        _, tok_big, w_big = fit(8, 1, SGD)
        code = proc.wait(timeout=300)
    assert code == 0, log.read_text(errors="replace")[-3000:]
    w_ds = torch.load(out)
    diff = max((w_ds[n] - w_big[n]).abs().max().item() for n in w_big)
    # summation order only (DeepSpeed's flat fp32 gradient buffer): tol 3.5e-7; without the
    # compensation the gradient is halved and the weights are off by ~3e-2
    tol = sgd_tolerance(w_big, tok_big)
    assert diff <= tol, f"max |w_deepspeed_2x4 - w_8| = {diff:.3g}, tolerance {tol:.3g}"
