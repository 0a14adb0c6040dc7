"""DDP, DeepSpeed ZeRO-2/3 and FSDP2 with two CPU processes (gloo) train the same LoRA weights, and
held-out metrics under DDP equal the single-process ones.

Settings shared by the runs: tests/integration/train/runs.py. Gradient clipping is off in these runs:
DeepSpeed computes its clip coefficient with its own (flattened) norm, which differs from torch's in
the last bits, and AdamW amplifies last-bit differences of near-zero gradients.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ifdistill.train.checkpointing import consolidated_state_dict
from ifdistill.methods.sft.module import SFTModule
from ifdistill.train.method import TrainingInputs

from tests.integration.train.runs import LR, STEPS, csv_rows, lora_weights, max_abs_diff
from tests.support import adam_weight_tolerance, sum_relative_error

pytestmark = pytest.mark.slow

HELD_OUT = "val/synthetic_train"


def _step0(run: dict) -> dict[str, float]:
    row = next(r for r in csv_rows(run) if r.get(f"{HELD_OUT}/ce") and int(r["step"]) == 0)
    return {k: float(v) for k, v in row.items() if k.startswith(HELD_OUT) and v}


def test_held_out_metrics_under_ddp_equal_single_process(runs):
    single, ddp = _step0(runs.get("single")), _step0(runs.get("ddp"))
    assert single[f"{HELD_OUT}/tokens"] == ddp[f"{HELD_OUT}/tokens"] > 0  # padding added no token
    # token sums split over two ranks and other batch shapes: float32 summation order over the held-out
    # tokens (~1e-5 relative for a few thousand); a mean of per-rank means or a padding token counted
    # changes the value by the ranks' difference in it, orders of magnitude more
    tol = sum_relative_error(single[f"{HELD_OUT}/tokens"])
    for metric in ("ce", "acc", "entropy"):
        key = f"{HELD_OUT}/{metric}"
        assert ddp[key] == pytest.approx(single[key], rel=tol), key


@pytest.mark.parametrize("strategy", ["zero2", "zero3", "fsdp2"])
def test_strategy_trains_the_same_lora_weights_as_ddp(runs, strategy):
    ref = lora_weights(runs.get("ddp"))
    got = lora_weights(runs.get(strategy))
    moved = max(v.abs().max().item() for k, v in ref.items() if "lora_B" in k)
    diff = max_abs_diff(ref, got)
    print(f"{strategy}: max |w - w_ddp| = {diff:.3g} after {STEPS} steps (lora_B max {moved:.3g})")
    assert moved > 1e-4  # the adapters did train
    # AdamW, lr 1e-4, 8 steps: 1 % of lr * steps = 8e-6 (measured up to 1.46e-6, ZeRO-3); a step on a
    # different gradient (no all-reduce, a rank's half only) moves weights by O(lr) = 1e-4
    tol = adam_weight_tolerance(LR, STEPS)
    assert diff <= tol, f"max |w - w_ddp| = {diff:.3g}, tolerance {tol:.3g}"


def test_zero3_checkpoint_is_sharded_and_consolidates_to_a_plain_state_dict(runs, tiny_model_dir):
    run = runs.get("zero3")
    ckpt = Path(run["run_dir"]) / "checkpoints" / f"step={STEPS:06d}.ckpt"
    assert ckpt.is_dir() and (ckpt / "latest").is_file()  # per-rank shards, not one file
    state = consolidated_state_dict(ckpt)
    module = SFTModule(TrainingInputs({"name_or_path": "builtin:tiny"}, {"method": "lora", "r": 4, "alpha": 8,
                                                                         "dropout": 0.1}))
    module.load_state_dict(state, strict=True)
    for name, p in module.named_parameters():
        if "lora_B" in name:
            assert torch.equal(p.detach(), state[name])
