"""A replay sweep of distillation runs shares one teacher pass (method.teacher_source=cache).

2 replay ratios x 2 seeds on the tiny model, per-example 2-shot demonstrations, ``data.total`` fixed (so
the new examples kept depend on the ratio). Sweep A shares one cache folder: every distinct teacher
view is computed exactly once over the sweep (the counts the runs report add up to the views the cache
holds; the second seed of a ratio computes nothing; the second ratio computes only what the first did
not). Sweep B clears the cache before every run, so each run computes its own. The final weights of
the two sweeps are equal bit for bit: the cache is a pure function of its key.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from ifdistill.train.run import train

pytestmark = pytest.mark.slow

CONF = Path(__file__).resolve().parents[3] / "conf"
STEPS = 3
SWEEP = [(ratio, seed) for ratio in (0.25, 0.5) for seed in (1, 2)]


def _cfg(out: Path, cache: Path, ratio: float, seed: int):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[
            "model=tiny", "data=synthetic_replay", "method=distill", "method.k=2", "method.demos=per_example",
            "method.teacher_source=cache", f"method.cache_dir={cache}", "method.cache_k=16",
            "peft=lora", "peft.r=4", "peft.dropout=0.0", "trainer=cpu", "logger=csv",
            "+data.sources.0.max_examples=40", "+data.replay.0.max_examples=40", "data.heldout=0",
            "data.total=16", f"data.ratio={ratio}", f"seed={seed}", "data.max_length=384",
            "datamodule.micro_batch_size=2", f"trainer.max_steps={STEPS}", "trainer.log_every_n_steps=1",
            "optim.lr=1e-3", "optim.schedule=constant", "run.eval_every_n_steps=1000",
            f"run.checkpoint_every_n_steps={STEPS}", f"paths.output_root={out}", f"paths.output_dir={out}/hydra"])


def _weights(result: dict) -> dict[str, torch.Tensor]:
    ckpt = Path(result["run_dir"]) / "checkpoints" / f"step={STEPS:06d}.ckpt"
    return torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]


def test_a_sweep_computes_each_teacher_view_once_and_trains_as_without_sharing(tmp_path):
    torch.set_num_threads(1)  # a shared 2-core machine: one thread is faster than two contending ones
    shared = tmp_path / "cache-shared"
    a = {run: train(_cfg(tmp_path / "a", shared, *run)) for run in SWEEP}
    computed = {run: r["teacher_pass"]["computed_views"] for run, r in a.items()}
    (folder,) = [p for p in shared.iterdir() if p.is_dir()]
    keys = list(_keys(folder))
    held = len(set(keys))
    assert held == len(keys)  # each key in one shard only
    assert sum(computed.values()) == held  # no view computed twice
    assert computed[(0.25, 2)] == 0 and computed[(0.5, 2)] == 0  # a seed replicate finds everything
    # ratio 0.5 keeps 8 of the 12 new examples that ratio 0.25 keeps, with the same demonstrations (the pool
    # is taken before data.total's subset): all hits. Its 8 replay examples nest the 4 of ratio 0.25, so
    # exactly the 4 others are computed.
    assert computed[(0.5, 1)] == round(16 * 0.5) - round(16 * 0.25)
    assert all(r["global_step"] == STEPS for r in a.values())

    cleared = tmp_path / "cache-cleared"
    for run in SWEEP:
        shutil.rmtree(cleared, ignore_errors=True)
        b = train(_cfg(tmp_path / "b", cleared, *run))
        assert b["teacher_pass"]["cached_before"] == 0
        assert b["teacher_pass"]["computed_views"] == a[run]["teacher_pass"]["views"]
        wa, wb = _weights(a[run]), _weights(b)
        assert wa.keys() == wb.keys()
        for name in wa:
            assert torch.equal(wa[name], wb[name]), (run, name)


def _keys(folder: Path):
    import json

    for entry in folder.glob("shard-*.json"):
        yield from json.loads(entry.read_text())["keys"]


def test_the_pass_as_its_own_command_in_shards_then_training_computes_nothing(tmp_path):
    """``+teacher_pass.only=true`` as two tasks of an array (shard 0 and 1 of 2), then the run: all hits."""
    from omegaconf import open_dict

    from ifdistill.train.preflight import PreflightError, preflight

    torch.set_num_threads(1)
    cache = tmp_path / "cache"
    parts = []
    for shard in (0, 1):
        cfg = _cfg(tmp_path / "out", cache, 0.25, 1)
        with open_dict(cfg):
            cfg.teacher_pass = {"only": True, "shard": shard, "num_shards": 2}
        parts.append(train(cfg)["teacher_pass"])
    assert not (tmp_path / "out" / "train").exists()  # the pass alone makes no run directory
    assert all(p["computed_views"] > 0 for p in parts)
    assert parts[1]["cached_before"] == parts[0]["computed_views"]
    run = train(_cfg(tmp_path / "out", cache, 0.25, 1))
    assert run["teacher_pass"]["computed_views"] == 0
    assert run["teacher_pass"]["cached_before"] == run["teacher_pass"]["views"] == sum(p["computed_views"] for p in parts)

    shared = _cfg(tmp_path / "out", cache, 0.25, 1)
    shared.method.demos = "shared"
    with pytest.raises(PreflightError, match="method.demos=per_example") as err:
        preflight(shared, check_model=False)
    assert "\n" not in str(err.value)
