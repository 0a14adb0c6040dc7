"""The non-finite guard in a real Lightning loop on a one-weight model (seconds; the tiny-model runs are
tests/integration/train/test_divergence.py).

- A batch holding NaN makes that step's loss NaN: ``skip`` leaves the weight exactly as it was (no
  update, no moment, no weight decay) and training goes on with the next batches; ``stop`` ends the fit
  at that step naming the loss.
- Finite loss and gradient can still overflow the weight: SGD with a learning rate of 3e38 and a
  gradient of 10 writes infinity; the guard stops at that step naming the weights, before the
  checkpoint callback (which Lightning runs last) writes it.
- Torch's fused AdamW (the CUDA default; it runs on CPU too) takes the guard's device-side path: the
  flags go to the optimizer as ``found_inf`` and are read on the host only at the read steps. The same
  runs end the same way, and a finite run's weights are bit for bit those of an unguarded run.
"""

from __future__ import annotations

import math
from typing import Optional

import lightning.pytorch as pl
import pytest
import torch

from ifdistill.train.nonfinite import NonFiniteGuard, TrainingDiverged, all_finite


class OneWeight(pl.LightningModule):
    def __init__(self, lr: float, optimizer: str = "adamw"):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(1))
        self.lr, self.optimizer = lr, optimizer
        self.seen: list[float] = []  # the weight at the start of each step

    def training_step(self, batch, batch_idx):
        self.seen.append(float(self.w.detach()))
        return (self.w * batch).sum()

    def configure_optimizers(self):
        if self.optimizer == "sgd":
            return torch.optim.SGD(self.parameters(), lr=self.lr)
        return torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.1, fused=self.optimizer == "fused")


def fit(module: OneWeight, batches: list[float], guard: Optional[NonFiniteGuard], log_every: int = 50) -> pl.Trainer:
    data = torch.utils.data.DataLoader([torch.tensor([b]) for b in batches], batch_size=None)
    trainer = pl.Trainer(accelerator="cpu", max_steps=len(batches), callbacks=[guard] if guard else [], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         log_every_n_steps=log_every)
    trainer.fit(module, data)
    return trainer


ADAMW = pytest.mark.parametrize("optimizer", ["adamw", "fused"])


@ADAMW
def test_skip_leaves_the_weight_untouched_and_training_goes_on(optimizer):
    module, guard = OneWeight(lr=0.1, optimizer=optimizer), NonFiniteGuard("skip", max_skipped_steps=1)
    trainer = fit(module, [1.0, math.nan, 1.0, 1.0], guard)
    assert trainer.global_step == 4 and guard.skipped == [{"step": 2, "quantity": "loss"}]
    before, after_skip = module.seen[1], module.seen[2]
    assert after_skip == before  # step 2 changed nothing, not even through weight decay
    assert module.seen[3] != after_skip and math.isfinite(float(module.w.detach()))  # steps 3 and 4 trained


@ADAMW
def test_skip_past_the_bound_and_stop_end_the_fit_at_that_step(optimizer):
    with pytest.raises(TrainingDiverged, match=r"non-finite loss at optimizer step 3 \(run.on_nonfinite=skip, "
                                               r"1 steps skipped already\)"):
        fit(OneWeight(lr=0.1, optimizer=optimizer), [1.0, math.nan, math.nan, 1.0],
            NonFiniteGuard("skip", max_skipped_steps=1))
    module = OneWeight(lr=0.1, optimizer=optimizer)
    with pytest.raises(TrainingDiverged, match=r"non-finite loss at optimizer step 2 \(run.on_nonfinite=stop\)"):
        fit(module, [1.0, math.nan, 1.0], NonFiniteGuard("stop"))
    assert math.isfinite(float(module.w.detach()))  # the NaN gradients were dropped, not applied


def test_an_overflowing_update_stops_naming_the_weights():
    module = OneWeight(lr=3e38, optimizer="sgd")  # w - 3e38 * 10 overflows float32 (max ~3.4e38)
    with pytest.raises(TrainingDiverged, match=r"non-finite weights after the update at optimizer step 1"):
        fit(module, [10.0, 1.0], NonFiniteGuard("skip"))  # not skippable: the update is applied already
    assert math.isinf(float(module.w.detach()))


def test_finite_values_whose_sum_overflows_are_finite():
    huge = torch.full((2,), 3e38)  # finite; their float32 sum is inf
    assert all_finite([huge, torch.ones(3, dtype=torch.bfloat16)]) and all_finite([])
    assert not all_finite([huge, torch.tensor([1.0, math.nan])]) and not all_finite([torch.tensor([-math.inf])])


def test_an_overflowing_fused_update_stops_naming_the_weights_of_that_step():
    # AdamW (decay 0.1, first update lr * sign(g)) moves 1 -> 1 - 1e36 - 1e37 ~ -1.1e37 (finite) at step 1;
    # the decay of step 2 multiplies that by (1 - 1e36): past float32's ~3.4e38, non-finite after step 2
    module = OneWeight(lr=1e37, optimizer="fused")
    with pytest.raises(TrainingDiverged, match=r"non-finite weights after the update at optimizer step 2"):
        fit(module, [10.0, 1.0, 1.0], NonFiniteGuard("skip"))


def test_the_device_side_guard_reads_once_per_read_step_and_changes_no_result():
    guard = NonFiniteGuard("stop")
    guarded = OneWeight(lr=0.1, optimizer="fused")
    fit(guarded, [1.0, -2.0, 0.5, 3.0, -1.0, 2.0, 1.5], guard, log_every=3)
    assert guard.reads == 3  # steps 3 and 6 (log_every_n_steps) and 7 (the last), not one per step
    plain = OneWeight(lr=0.1, optimizer="fused")
    fit(plain, [1.0, -2.0, 0.5, 3.0, -1.0, 2.0, 1.5], None)
    # found_inf = 0 runs the same kernel on the same inputs: equal bit for bit, the tolerance is zero
    assert guarded.seen == plain.seen and torch.equal(guarded.w.detach(), plain.w.detach())
