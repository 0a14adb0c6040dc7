"""Gradient accumulation 2 x 4 equals batch 8: the loss is normalised by the tokens of the whole step.

A per-micro-batch mean would weight the two halves equally whatever their token counts, and the
accumulated step would differ from the batch-8 step. Runs the real Lightning loop in one process.
"""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.loggers import Logger

from ifdistill.train.datamodule import TrainDataModule
from ifdistill.train.sft_module import SFTModule

from tests.unit.train.conftest import LORA, TINY, perturb_lora, synthetic_data


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


def fit(micro_batch_size: int, accumulate: int, optim: dict, steps: int = 2):
    dm = TrainDataModule(synthetic_data(40), TINY, micro_batch_size=micro_batch_size)
    torch.manual_seed(0)  # the LoRA A matrices are drawn at construction
    module = SFTModule(TINY, LORA, optim)
    perturb_lora(module)  # lora_B != 0 so that every LoRA matrix gets a gradient from step 1
    recorder = Recorder()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, accumulate_grad_batches=accumulate,
                         log_every_n_steps=1,
                         logger=recorder, enable_checkpointing=False, use_distributed_sampler=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0)
    trainer.fit(module, datamodule=dm)
    losses = [m["train/loss"] for _, m in recorder.rows if "train/loss" in m]
    tokens = [m["train/tokens"] for _, m in recorder.rows if "train/tokens" in m]
    weights = {n: p.detach().clone() for n, p in module.lm.named_parameters() if p.requires_grad}
    return losses, tokens, weights


@pytest.mark.parametrize("optim,tol", [({"name": "sgd", "lr": 0.5, "schedule": "constant"}, 1e-6),
                                       ({"name": "adamw", "lr": 1e-4, "schedule": "constant"}, 1e-6)])
def test_accumulating_2x4_equals_batch_8(optim, tol):
    loss_acc, tok_acc, w_acc = fit(4, 2, optim)
    loss_big, tok_big, w_big = fit(8, 1, optim)
    assert tok_acc == tok_big and len(loss_acc) == 2  # the same examples in each step
    assert loss_acc == pytest.approx(loss_big, rel=1e-6, abs=1e-6)
    diff = max((w_acc[n] - w_big[n]).abs().max().item() for n in w_acc)
    moved = max((w_acc[n]).abs().max().item() for n in w_acc if "lora_B" in n)
    assert diff <= tol, f"max |w_2x4 - w_8| = {diff:.3g} (lora_B scale {moved:.3g})"
