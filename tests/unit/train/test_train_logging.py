"""Every optimizer step's training metrics reach the loggers, the last partial interval included."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from ifdistill.train.datamodule import TrainDataModule
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train.method import TrainingInputs

from tests.unit.train.conftest import LORA, TINY, resolved, synthetic_data
from tests.unit.train.test_accumulation import Recorder


@pytest.mark.parametrize("max_steps,every", [(3, 2), (5, 2), (4, 3)])
def test_the_last_partial_logging_interval_is_logged(max_steps, every):
    """A run ending inside a logging interval (e.g. max_steps=3, log_every_n_steps=2) reduces *and logs* its
    last steps' metrics."""
    dm = TrainDataModule(resolved(synthetic_data(40)), TINY, micro_batch_size=2)
    torch.manual_seed(0)
    module = SFTModule(TrainingInputs(TINY, LORA, {"name": "sgd", "lr": 0.1, "schedule": "constant"}))
    recorder = Recorder()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=max_steps, log_every_n_steps=every,
                         logger=recorder, enable_checkpointing=False, use_distributed_sampler=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         limit_val_batches=0)
    trainer.fit(module, datamodule=dm)
    logged = [step for step, m in recorder.rows if "train/ce" in m]
    expected = sorted({*range(every, max_steps + 1, every), max_steps})
    # Lightning's step for a row logged after optimizer step s is s - 1 (its counter of batches that
    # stepped before this one); the partial interval is logged at the same convention.
    assert [s + 1 for s in logged] == expected, logged
    assert all(m["train/ce"] > 0 for _, m in recorder.rows if "train/ce" in m)
