"""Jobs that fill one teacher cache at once share the pass through claims: each view is computed once, a
dead job's claims are taken over after they expire, and a half-written shard is never read.

The teacher here is a pure function of the view key (seeded logits -> top-k), so the protocol is tested
with real files, real threads and a real SIGKILLed process at no model cost; the training runs that
share a pass are in tests/integration/train/test_teacher_cache_sweep.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ifdistill.methods.distill import teacher_cache
from ifdistill.methods.distill.teacher_cache import CacheNamespace, TeacherCache
from ifdistill.methods.distill.teacher_pass import PassStats, TeacherViewRef, shared_pass, teacher_topk
from ifdistill.methods.distill.teacher_pass_claims import ClaimBoard

ROOT = Path(__file__).resolve().parents[3]
K, V, PER_SHARD = 4, 50, 4
NS = CacheNamespace(teacher={"model.safetensors": "ab" * 32}, dtype="torch.float32", vocab_size=V, k=K,
                    temperature=1.0)


def views(first: int, last: int) -> list[TeacherViewRef]:
    return [TeacherViewRef.of(np.arange(i, i + 6), np.arange(2, 6)) for i in range(first, last)]


def teacher(view: TeacherViewRef):
    """The cached numbers of one view: a function of its key alone, as a frozen teacher's are."""
    g = torch.Generator().manual_seed(int(view.key[:8], 16))
    ids, logp, tail = teacher_topk(torch.randn(len(view.positions), V, generator=g), K)
    return view.key, ids.numpy(), logp.numpy(), tail.numpy()


def compute_into(cache: TeacherCache, seconds_per_view: float = 0.01):
    def compute(part):
        time.sleep(seconds_per_view * len(part))  # a teacher takes time: jobs started together overlap
        cache.write_shard([teacher(v) for v in part])
        return PassStats(computed=len(part), tokens=sum(len(v.positions) for v in part))
    return compute


def job(root: Path, need: list[TeacherViewRef], expiry_s: float, start: threading.Barrier | None = None) -> PassStats:
    cache = TeacherCache(root, NS).open()
    if start is not None:
        start.wait()
    with ClaimBoard(cache.dir, expiry_s=expiry_s) as board:
        return shared_pass(compute_into(cache), need, cache, board, views_per_shard=PER_SHARD)


def together(root: Path, needs: list[list[TeacherViewRef]], expiry_s: float = 4.0) -> list[PassStats]:
    start, out = threading.Barrier(len(needs)), [None] * len(needs)

    def run(i):
        out[i] = job(root, needs[i], expiry_s, start)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(needs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(s is not None for s in out), "a job did not finish"
    return out


def assert_complete_and_exact(root: Path, need: list[TeacherViewRef]) -> None:
    """Every view present once, with the numbers the teacher gives it (float16 log-probabilities)."""
    cache = TeacherCache(root, NS).open()
    assert cache.missing(v.key for v in need) == []
    for v in need:
        key, ids, logp, tail = teacher(v)
        got = cache.get(key)
        assert torch.equal(got.ids, torch.from_numpy(ids).long()) and torch.equal(got.tail, torch.from_numpy(tail))
        assert torch.equal(got.logp, torch.from_numpy(logp).half().float())


@pytest.mark.parametrize("needs", [
    [(0, 24), (0, 24)],  # seed replicates: the same views
    [(0, 24), (8, 32), (16, 40)],  # three replay ratios: overlapping views
], ids=["two-jobs", "three-jobs"])
def test_jobs_started_together_compute_each_view_once(tmp_path, needs):
    need = [views(a, b) for a, b in needs]
    union = {v.key for n in need for v in n}
    stats = together(tmp_path, need)
    assert sum(s.computed for s in stats) == len(union)  # no view computed twice
    for s, n in zip(stats, need):
        assert s.views == len(n) == s.cached_before + s.computed + s.waited
    assert sum(s.computed > 0 for s in stats) >= 2  # the work was split, not done by one job
    entries = [k for e in (tmp_path / NS.id).glob("shard-*.json") for k in json.loads(e.read_text())["keys"]]
    assert sorted(entries) == sorted(union)
    assert_complete_and_exact(tmp_path, [v for n in need for v in n])
    assert not list((tmp_path / NS.id / "claims").iterdir())  # every claim released


def test_a_claim_expires_only_after_its_owner_stops_beating(tmp_path):
    now = [0.0]
    owner = ClaimBoard(tmp_path, expiry_s=10.0)
    watcher = ClaimBoard(tmp_path, expiry_s=10.0, clock=lambda: now[0])
    key = views(0, 1)[0].key
    with owner:
        owner._stop.set()  # this test beats by hand
        assert owner.claim([key], watcher.scan()) == [key]
        claim = watcher.scan()[key]
        assert claim.owner == owner.owner and claim.generation == 0

        def expired():  # as a waiting job looks: a scan (the beats read anew), then the claim's state
            return watcher.expired(watcher.scan()[key])
        assert not expired()  # first seen: the clock starts
        now[0] = 9.9
        assert not expired()
        owner._write_beat()
        now[0] = 15.0
        assert not expired()  # a new beat restarts the clock
        now[0] = 25.0
        assert expired()
        # two jobs see it expire together: exactly one wins the takeover
        other = ClaimBoard(tmp_path, expiry_s=10.0)
        current = watcher.scan()
        assert watcher.claim([key], current) == [key] and other.claim([key], current) == []
        assert watcher.scan()[key].owner == watcher.owner and watcher.taken == {key}


def victim(root: str, expiry_s: float) -> None:
    """A job that writes one shard, claims the next and is SIGKILLed half-way through writing it."""
    cache = TeacherCache(root, NS).open()
    real, compute, calls = teacher_cache.atomic_write, compute_into(cache, 0.0), []

    class HalfThenKilled:
        def __init__(self, path, mode):
            self.inner = real(path, mode)

        def __enter__(self):
            handle = self.inner.__enter__()
            write = handle.write

            def half(data):
                write(data[: len(data) // 2])
                handle.flush()
                os.fsync(handle.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
            handle.write = half
            return handle

        def __exit__(self, *exc):
            return self.inner.__exit__(*exc)

    def dying(part):
        calls.append(part)
        if len(calls) == 2:
            teacher_cache.atomic_write = HalfThenKilled
        return compute(part)

    with ClaimBoard(cache.dir, expiry_s=expiry_s) as board:
        shared_pass(dying, views(0, 16), cache, board, views_per_shard=PER_SHARD)


def test_a_killed_jobs_claims_are_taken_over_and_its_half_shard_never_read(tmp_path):
    expiry = 1.0
    code = f"from tests.unit.train.test_teacher_pass_claims import victim; victim({str(tmp_path)!r}, {expiry})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    folder = tmp_path / NS.id
    held = [p.name for p in (folder / "claims").iterdir()]
    assert len(held) == PER_SHARD  # killed while holding its second batch
    assert len(list(folder.glob(".shard-*.tmp"))) == 1  # ... half-way through writing its shard
    assert len(TeacherCache(tmp_path, NS).open()) == PER_SHARD  # only its first shard is complete

    t0 = time.monotonic()
    stats = together(tmp_path, [views(0, 16), views(0, 16)], expiry_s=expiry)
    assert time.monotonic() - t0 >= expiry  # the dead job's views waited for its claims to expire
    assert sum(s.taken_over for s in stats) == PER_SHARD
    assert sum(s.computed for s in stats) == 16 - PER_SHARD  # the rest once, its taken-over views included
    assert all(s.cached_before == PER_SHARD for s in stats)
    assert_complete_and_exact(tmp_path, views(0, 16))
    assert not list((folder / "claims").iterdir())
