"""The teacher pass shared by 2 DDP ranks (gloo, through claims as jobs share it), through ``ifdistill-train``
as a user runs it, and a damaged shard stopping a later run with one line naming the file (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.methods.distill.teacher_cache import TeacherCache
from tests.integration.train.runs import ROOT, env

pytestmark = pytest.mark.slow

SETTING = [
    "model=tiny", "data=synthetic", "method=distill", "method.k=2", "method.demos=per_example",
    "method.teacher_source=cache", "method.cache_k=16", "peft=lora", "peft.r=4", "logger=csv",
    "+data.sources.0.max_examples=24", "data.heldout=0", "data.max_length=384", "datamodule.micro_batch_size=2",
    "trainer.max_steps=2", "trainer.log_every_n_steps=1", "run.eval_every_n_steps=1000",
    "run.checkpoint_every_n_steps=2",
]


def _cli(root: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ifdistill.cli.train", *SETTING, f"method.cache_dir={cache}", *extra,
           f"paths.output_root={root}", f"hydra.run.dir={root}/hydra"]
    return subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)


def _summary(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith('{"run_id"')][-1])


def test_pass_split_over_ddp_ranks_then_a_damaged_shard_is_one_line(tmp_path):
    cache = tmp_path / "cache"
    ddp = _summary(_cli(tmp_path / "ddp", cache, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"))
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    keys = [k for e in folder.glob("shard-*.json") for k in json.loads(e.read_text())["keys"]]
    # every view the two ranks read (2 steps x 2 ranks x 2 examples), each computed once by one of them
    assert len(keys) == len(set(keys)) == ddp["teacher_pass"]["views"] == 8
    assert ddp["teacher_pass"]["computed_views"] == len(keys) and ddp["teacher_pass"]["waited_views"] == 0

    shards = sorted(folder.glob("shard-*.npz"))
    for shard in shards:  # both: the first step reads one of them
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    proc = _cli(tmp_path / "single", cache, "trainer=cpu")
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert any(last.startswith(f"ifdistill-train: error: {s}: teacher-cache shard altered") for s in shards), last
