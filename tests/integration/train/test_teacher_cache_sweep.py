"""Distillation runs share one teacher pass (method.teacher_source=cache), and a run pays only for what it reads.

Tiny model, per-example 2-shot demonstrations, synthetic data + replay with ``data.total`` fixed (the new
examples kept depend on the ratio). Each run records the teacher views its training steps read
(:class:`RecordReads`, a callback that knows nothing of the pass's planning): the views a run needs.

- Runs started together (processes of their own, one cache folder), two and then three: the
  views computed, summed over the jobs, equal the distinct views they read; every job finishes; the final
  weights equal those of the same runs made one after another, each with a cache of its own (bit for
  bit: the cache is a pure function of its key).
- A 20-step run computes the views of what it reads and no more; a run resumed from it with a higher
  step limit (``run.resume_from``) computes only the views its further steps read that were not cached.
- The pass as its own command in two parts (an array's tasks), then a run that computes nothing.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import ifdistill.conf  # noqa: F401  (the resolvers and section schemas the YAML under conf/ uses)
from ifdistill.train.config_edge import train_config
from ifdistill.train.run import train
from tests.integration.train.runs import ROOT

pytestmark = pytest.mark.slow

CONF = ROOT / "conf"
STEPS = 4
RUNS = [(0.25, 1), (0.25, 2), (0.5, 1)]  # (data.ratio, seed)
READS = "tests.integration.train.test_teacher_cache_sweep.RecordReads"


class RecordReads(pl.Callback):
    """Writes the key of every teacher view the training steps read to ``path`` (JSON list)."""

    def __init__(self, path: str):
        self.path, self.keys = Path(path), []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        from ifdistill.methods.distill.teacher_pass import batch_views

        self.keys += [v.key for v in batch_views(batch)]

    def on_train_end(self, trainer, pl_module):
        self.path.write_text(json.dumps(self.keys))


def _replay(ratio: float) -> list[str]:
    return ["data=synthetic_replay", "+data.sources.0.max_examples=40", "+data.replay.0.max_examples=40",
            "data.total=16", f"data.ratio={ratio}"]


def _overrides(out: Path, cache: Path, ratio: float, seed: int, *, data=None, steps: int = STEPS,
               micro_batch: int = 2) -> list[str]:
    """A run of ``RUNS`` (``data``: other data overrides instead of the replay mixture at ``ratio``)."""
    return ["model=tiny", "method=distill", "method.k=2", "method.demos=per_example",
            "method.teacher_source=cache", f"method.cache_dir={cache}", "method.cache_k=16",
            "method.cache_views_per_shard=2", "peft=lora", "peft.r=4", "peft.dropout=0.0", "trainer=cpu",
            "logger=csv", *(data or _replay(ratio)), "data.heldout=0", f"seed={seed}", "data.max_length=384",
            f"datamodule.micro_batch_size={micro_batch}", f"trainer.max_steps={steps}", "trainer.log_every_n_steps=1",
            "optim.lr=1e-3", "optim.schedule=constant", "run.eval_every_n_steps=1000",
            f"run.checkpoint_every_n_steps={steps}", f"paths.output_root={out}",
            f"+callbacks.reads._target_={READS}", f"+callbacks.reads.path={out}/reads.json"]


def _cfg(overrides: list[str], out: Path):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("train", overrides=[*overrides, f"paths.output_dir={out}/hydra"])


def _reads(out: Path) -> set[str]:
    return set(json.loads((out / "reads.json").read_text()))


def _weights(result: dict, step: int = STEPS) -> dict[str, torch.Tensor]:
    ckpt = Path(result["run_dir"]) / "checkpoints" / f"step={step:06d}.ckpt"
    return torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]


def _keys(cache: Path) -> list[str]:
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    return [k for e in folder.glob("shard-*.json") for k in json.loads(e.read_text())["keys"]]


def _job(cfg, out: Path) -> None:
    """One job of :func:`_together`, in a forked process: train, write the summary, leave."""
    code = 1
    try:
        result = train(train_config(cfg))
        (out / "summary.json").write_text(json.dumps({k: v for k, v in result.items() if k != "metrics"}))
        code = 0
    finally:
        os._exit(code)


def _together(root: Path, cache: Path, runs) -> list[dict]:
    """The runs started at once, each a process of its own (forked: separate jobs to the claims, without
    each paying the imports again); their summaries, in order."""
    ctx = multiprocessing.get_context("fork")
    procs = []
    for i, run in enumerate(runs):
        out = root / f"job{i}"
        out.mkdir(parents=True)
        procs.append(ctx.Process(target=_job, args=(_cfg(_overrides(out, cache, *run), out), out)))
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=600)
        if proc.is_alive():  # hung: end it, then fail
            proc.kill()
            proc.join()
        assert proc.exitcode == 0, f"job {proc.pid} ended with {proc.exitcode}"
    return [json.loads((root / f"job{i}" / "summary.json").read_text()) for i in range(len(runs))]


def test_runs_started_together_compute_each_view_once_and_train_as_one_after_another(tmp_path):
    torch.set_num_threads(1)  # before any fork; every job the same kernels, the same bits
    alone = {}
    for run in RUNS:  # one after another, each with its own cache: the reference
        out = tmp_path / "alone" / f"{run[0]}-{run[1]}"
        result = train(train_config(_cfg(_overrides(out, out / "cache", *run), out)))
        assert result["teacher_pass"]["computed_views"] == len(_reads(out)) > 0
        alone[run] = _weights(result)

    for runs in (RUNS[:2], RUNS):
        root, cache = tmp_path / f"together-{len(runs)}", tmp_path / f"cache-{len(runs)}"
        summaries = _together(root, cache, runs)
        needed = set().union(*(_reads(root / f"job{i}") for i in range(len(runs))))
        passes = [s["teacher_pass"] for s in summaries]
        assert sum(p["computed_views"] for p in passes) == len(needed)  # no view computed twice
        assert sorted(_keys(cache)) == sorted(needed)  # each in one shard, none the runs did not read
        for p, s in zip(passes, summaries):
            assert s["global_step"] == STEPS
            assert p["views"] == p["cached_before"] + p["computed_views"] + p["waited_views"]
            run_json = json.loads((Path(s["run_dir"]) / "run.json").read_text())
            assert run_json["launches"][-1]["teacher_pass"]["computed_views"] == p["computed_views"]
            assert 0 < p["pass_share"] < 1
        for run, s in zip(runs, summaries):
            wa, wb = alone[run], _weights(s)
            assert wa.keys() == wb.keys()
            for name in wa:
                assert torch.equal(wa[name], wb[name]), (run, name)


def test_a_run_computes_what_it_reads_and_a_resumed_run_what_it_reads_next(tmp_path):
    """24 examples, 1 per step: 20 steps read 20 of them; resumed to 30 steps, it reads the 4 left of the
    first epoch, then 6 of the second epoch's order, some read before."""
    torch.set_num_threads(1)
    cache = tmp_path / "cache"
    first_out, then_out = tmp_path / "first", tmp_path / "then"
    data = ["data=synthetic", "+data.sources.0.max_examples=24"]

    def cfg(out, steps, *extra):
        runs = _overrides(out, cache, 0.0, 1, data=data, steps=steps, micro_batch=1)
        return _cfg([*runs, "run.checkpoint_every_n_steps=20", *extra], out)

    first = train(train_config(cfg(first_out, 20)))["teacher_pass"]
    read_first = _reads(first_out)
    assert first["computed_views"] == first["views"] == len(read_first) == 20  # 20 steps x 1, all distinct
    assert set(_keys(cache)) == read_first  # not the 4 examples it never read

    run_first = next((tmp_path / "first" / "train" / "runs").iterdir())
    then = train(train_config(cfg(then_out, 30, f"run.resume_from={run_first}")))
    assert then["global_step"] == 30
    p, read_then = then["teacher_pass"], _reads(then_out)
    again = read_then & read_first
    assert again and read_then - read_first  # the test needs both kinds
    assert p["computed_views"] == len(read_then - read_first)
    assert p["cached_before"] == len(again) and p["views"] == len(read_then)
    assert set(_keys(cache)) == read_first | read_then


def test_the_pass_as_its_own_command_in_parts_then_training_computes_nothing(tmp_path):
    """``+teacher_pass.only=true`` as two tasks of an array (part 0 and 1 of 2), then the run: all hits."""
    from omegaconf import open_dict

    from ifdistill.train.preflight import PreflightError

    torch.set_num_threads(1)
    cache = tmp_path / "cache"
    parts = []
    for shard in (0, 1):
        cfg = _cfg(_overrides(tmp_path / "out", cache, 0.25, 1), tmp_path)
        with open_dict(cfg):
            cfg.teacher_pass = {"only": True, "shard": shard, "num_shards": 2}
        parts.append(train(train_config(cfg))["teacher_pass"])
    assert not (tmp_path / "out" / "train").exists()  # the pass alone makes no run directory
    assert all(p["computed_views"] == p["views"] > 0 and p["cached_before"] == 0 for p in parts)
    assert len(_keys(cache)) == sum(p["views"] for p in parts) == 16  # the whole training set (data.total)
    run = train(train_config(_cfg(_overrides(tmp_path / "out", cache, 0.25, 1), tmp_path)))["teacher_pass"]
    assert run["computed_views"] == 0 and run["cached_before"] == run["views"] == len(_reads(tmp_path / "out"))

    shared = _cfg(_overrides(tmp_path / "out", cache, 0.25, 1), tmp_path)
    shared.method.demos = "shared"
    with pytest.raises(PreflightError, match="method.demos=per_example") as err:
        train_config(shared, check_model=False)
    assert "\n" not in str(err.value)
