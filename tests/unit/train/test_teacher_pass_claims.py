"""Jobs that fill one teacher cache at once share the pass through claims: each view is computed once, a
dead job's claims are taken over (at once when it provably died on this host, else after they expire), a
half-written shard is never read and is removed, and a job that waits says for what.

The teacher here is a pure function of the view key (seeded logits -> top-k), so the protocol is tested
with real files, real threads and a real SIGKILLed process at no model cost; the training runs that
share a pass are in tests/integration/train/test_teacher_cache_sweep.py.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ifdistill.methods.distill import teacher_cache
from ifdistill.methods.distill import teacher_cache_clean as clean_module
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


def compute_into(cache: TeacherCache, seconds_per_view: float = 0.01, first: threading.Barrier | None = None):
    """A teacher that takes time; with ``first``, each job's first computation waits until every job holds a
    claim of its own (a job computes only what it claimed), so jobs started together overlap however the
    threads are scheduled."""
    waited = []

    def compute(part):
        if first is not None and not waited:
            waited.append(True)
            first.wait(timeout=30)
        time.sleep(seconds_per_view * len(part))
        cache.write_shard([teacher(v) for v in part])
        return PassStats(computed=len(part), tokens=sum(len(v.positions) for v in part))
    return compute


def job(root: Path, need: list[TeacherViewRef], expiry_s: float, start: threading.Barrier | None = None,
        first: threading.Barrier | None = None) -> PassStats:
    cache = TeacherCache(root, NS).open()
    if start is not None:
        start.wait()
    with ClaimBoard(cache.dir, expiry_s=expiry_s) as board:
        return shared_pass(compute_into(cache, first=first), need, cache, board, views_per_shard=PER_SHARD)


def together(root: Path, needs: list[list[TeacherViewRef]], expiry_s: float = 4.0,
             overlap: bool = False) -> list[PassStats]:
    """The jobs in threads started at once; ``overlap``: each computes only after all hold a claim
    (:func:`compute_into`), so the split of the work does not depend on how the threads are scheduled."""
    start, out = threading.Barrier(len(needs)), [None] * len(needs)
    first = threading.Barrier(len(needs)) if overlap else None

    def run(i):
        out[i] = job(root, needs[i], expiry_s, start, first)

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
    stats = together(tmp_path, need, overlap=True)
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
        def __init__(self, path, mode, **kwargs):
            self.inner = real(path, mode, **kwargs)

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


def test_a_killed_jobs_claims_are_taken_over_at_once_and_its_leftovers_removed(tmp_path, caplog):
    """A writer SIGKILLed half-way through a shard: the next jobs (claim expiry 300 s) take its views over at
    once, since its pid is gone on this host, with one line per job that took some; its temp shard and owner
    file are removed; every view ends present, exact, and computed once."""
    expiry = 300.0
    code = f"from tests.unit.train.test_teacher_pass_claims import victim; victim({str(tmp_path)!r}, {expiry})"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    folder = tmp_path / NS.id
    held = [p.name for p in (folder / "claims").iterdir()]
    assert len(held) == PER_SHARD  # killed while holding its second batch
    assert len(list(folder.glob(".shard-*.tmp"))) == 1  # ... half-way through writing its shard
    assert len(list((folder / "owners").iterdir())) == 1  # ... and never removed its owner file
    assert len(TeacherCache(tmp_path, NS).open()) == PER_SHARD  # only its first shard is complete

    caplog.set_level(logging.INFO, logger="ifdistill")
    t0 = time.monotonic()
    stats = together(tmp_path, [views(0, 16), views(0, 16)], expiry_s=expiry)
    seconds = time.monotonic() - t0
    assert seconds < expiry / 10, seconds  # no waiting for the expiry: the claimer is provably gone
    assert sum(s.taken_over for s in stats) == PER_SHARD
    assert sum(s.computed for s in stats) == 16 - PER_SHARD  # the rest once, its taken-over views included
    assert all(s.cached_before == PER_SHARD for s in stats)
    assert_complete_and_exact(tmp_path, views(0, 16))
    assert not list((folder / "claims").iterdir())
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []  # no temp file left
    assert not list((folder / "owners").iterdir())  # nor any owner file (the two jobs removed theirs)
    took = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert 1 <= len(took) <= 2 and all("its process is gone on this host" in t for t in took), took
    assert sum(int(re.search(r"took over (\d+) view", t)[1]) for t in took) == PER_SHARD
    assert any("removed 1 temp file(s)" in r.getMessage() for r in caplog.records)


def test_a_writer_is_gone_when_its_pid_is_free_reused_or_a_zombie():
    """The test that lets a claim be taken over at once: only a process of this host, checked by pid and
    start time; a live one (this process) is not gone, another host's never provably is."""
    mine = clean_module.me()
    assert not clean_module.gone(mine)
    assert clean_module.gone({**mine, "start": str(int(mine["start"]) + 1)})  # the pid reused by another process
    assert not clean_module.gone({**mine, "host": mine["host"] + "-elsewhere"})
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    writer = {**mine, "pid": child.pid, "start": clean_module.process_start(child.pid)[0]}
    deadline = time.monotonic() + 30
    while clean_module.process_start(child.pid)[1] != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert clean_module.gone(writer)  # exited, not yet reaped: a zombie
    child.wait()
    assert clean_module.gone(writer)  # reaped: the pid is free


def test_waiting_for_a_live_claimer_says_what_it_waits_for_periodically(tmp_path, caplog):
    """A job whose views another live job holds says, at once and then every ``report_s``, how many views it
    waits for, whose (pid and host) and how long it has waited; it computes none of them."""
    need = views(0, 4)
    cache = TeacherCache(tmp_path, NS).open()
    caplog.set_level(logging.INFO, logger="ifdistill")
    with ClaimBoard(cache.dir, expiry_s=300.0) as holder:
        assert holder.claim([v.key for v in need], holder.scan()) == [v.key for v in need]

        def finish():
            time.sleep(1.2)
            TeacherCache(tmp_path, NS).open().write_shard([teacher(v) for v in need])
            holder.release([v.key for v in need])
        writer = threading.Thread(target=finish)
        writer.start()
        waiter = TeacherCache(tmp_path, NS).open()
        with ClaimBoard(cache.dir, expiry_s=300.0, report_s=0.5) as board:
            board.poll_s = 0.1
            stats = shared_pass(compute_into(waiter), need, waiter, board, views_per_shard=PER_SHARD)
        writer.join()
    assert stats.waited == 4 and stats.computed == 0
    lines = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert lines[0].startswith(f"teacher pass: waiting for 4 view(s) other jobs claim (4 by pid {os.getpid()} "
                               f"on {socket.gethostname()}")
    assert lines[0].endswith("0 s waited so far")
    # once at the start, then one per report_s of waiting (a poll may land just past a report's time)
    assert 2 <= len(lines) <= 2 + stats.wait_seconds / 0.5, lines


def test_the_clean_command_removes_only_what_gone_writers_left(tmp_path):
    """``python -m ...teacher_cache_clean CACHE_DIR`` (``make clean-teacher-cache``): a gone writer's temp
    shard and owner file go; a live writer's temp file, another host's recent one, the shards and the
    claims stay; another host's file untouched for longer than ``--older-than`` goes."""
    cache = TeacherCache(tmp_path, NS).open()
    cache.write_shard([teacher(v) for v in views(0, 2)])
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = {**clean_module.me(), "pid": child.pid, "start": clean_module.process_start(child.pid)[0]}
    child.wait()
    tag = f"w~{dead['host']}~{dead['pid']}~{dead['start']}~"
    folder = cache.dir
    (folder / f".shard-aa.npz.{tag}x1.tmp").write_bytes(b"\0" * 4096)
    (folder / "owners").mkdir()
    (folder / "owners" / f"{dead['host']}-{dead['pid']}-0000.json").write_text(json.dumps({**dead, "beat": 3}))
    live = folder / f".shard-bb.npz.{clean_module.writer_tag()}x2.tmp"
    live.write_bytes(b"1")
    remote_new = folder / ".shard-cc.npz.w~node7~12~345~x3.tmp"
    remote_old = folder / ".shard-dd.npz.w~node7~13~345~x4.tmp"
    remote_new.write_bytes(b"2")
    remote_old.write_bytes(b"3")
    os.utime(remote_old, (time.time() - 7200, time.time() - 7200))
    (folder / "claims").mkdir()
    (folder / "claims" / "k.0").write_text("someone")
    before = {p for p in folder.rglob("*")}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "ifdistill.methods.distill.teacher_cache_clean", *args],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                              timeout=60)
    out = run(str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (f"teacher-cache clean: {folder}: removed 1 temp file(s) (0.0 MiB) and 1 owner "
                                  "file(s) of writers that are gone")
    gone = before - {p for p in folder.rglob("*")}
    assert {p.name for p in gone} == {f".shard-aa.npz.{tag}x1.tmp", f"{dead['host']}-{dead['pid']}-0000.json"}
    out = run(str(folder), "--older-than", "3600")
    assert out.returncode == 0 and "removed 1 temp file(s)" in out.stdout and not remote_old.exists()
    assert live.exists() and remote_new.exists() and len(TeacherCache(tmp_path, NS).open()) == 2
    bad = run(str(tmp_path / "nothing-here"))
    assert bad.returncode == 2 and bad.stderr.strip().endswith("no teacher cache here (no namespace.json)")
