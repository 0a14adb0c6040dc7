"""Exact resume: kill -9 mid-run, run the same command again -> it finds its run directory (config
hash), resumes from the newest complete checkpoint with the same data order and RNG state, and ends
with weights bit-identical to an uninterrupted run (LoRA dropout 0.1 is on, so RNG state matters)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from tests.integration.train.runs import STEPS, csv_rows, lora_weights

pytestmark = pytest.mark.slow


def _train_rows(run: dict) -> dict[int, tuple[str, str]]:
    """step -> (loss, tokens) as logged (the last launch wins for a step logged twice)."""
    return {int(r["step"]): (r["train/loss"], r["train/tokens"]) for r in csv_rows(run) if r.get("train/loss")}


@pytest.mark.parametrize("strategy", ["single", "ddp", "zero3"])
def test_killed_run_resumes_bit_identical(runs, strategy):
    ref = runs.get(strategy)
    res = runs.get(strategy, resumed=True)
    assert res["config_hash"] == ref["config_hash"]
    assert 2 <= res["killed_at"] < STEPS
    assert res["resumed_from"].endswith(f"step={res['killed_at']:06d}.ckpt")
    assert res["global_step"] == ref["global_step"] == STEPS
    a, b = lora_weights(ref), lora_weights(res)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    # Same data order and dropout masks step by step: the logged loss and token count of every step
    # after the resume equal the uninterrupted run's.
    ref_rows, res_rows = _train_rows(ref), _train_rows(res)
    later = [s for s in ref_rows if s >= res["killed_at"]]
    assert later and all(res_rows[s] == ref_rows[s] for s in later)


def test_requeue_signal_saves_its_step_and_resumes_bit_identical(runs):
    """SIGUSR2 (SLURM's warning before a time limit or a preemption) to rank 0 of a 2-rank DDP run: both
    ranks stop at the same optimizer step, that step is checkpointed (not only the periodic ones), and
    the re-run resumes from it to the uninterrupted run's final weights."""
    ref = runs.get("ddp")
    res = runs.get("ddp", resumed=True, sig=signal.SIGUSR2)
    meta = json.loads((Path(res["run_dir"]) / "run.json").read_text())
    first, second = meta["launches"]
    assert "finished" not in first and "SIGUSR2" in first["stop_reason"]
    assert first["stopped_at_step"] == res["killed_at"] and 2 <= res["killed_at"] < STEPS
    assert res["resumed_from"].endswith(f"step={res['killed_at']:06d}.ckpt")
    assert second["final_step"] == STEPS
    a, b = lora_weights(ref), lora_weights(res)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
