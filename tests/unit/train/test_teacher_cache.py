"""The teacher cache: round trip, content addressing, and the faults that must end in one line naming a file."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from ifdistill.methods.distill.teacher_cache import CacheNamespace, TeacherCache, TeacherCacheError, view_key
from ifdistill.methods.distill.teacher_pass import teacher_topk

V = 300
WEIGHTS = {"model.safetensors": "ab" * 32}


def _ns(k: int = 8, **kw) -> CacheNamespace:
    return CacheNamespace(teacher=kw.pop("teacher", WEIGHTS), dtype="torch.float32", vocab_size=kw.pop("v", V), k=k,
                          temperature=1.0, **kw)


def _views(n: int, k: int, seed: int = 0, tokens: int = 5, v: int = V):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ids = np.arange(10 + i) + seed * 1000
        ti, tl, tt = teacher_topk(torch.randn(tokens, v, generator=g) * 3, k)
        out.append((view_key(ids, np.arange(3, 3 + tokens)), ti.numpy(), tl.numpy(), tt.numpy()))
    return out


def _one_line(err: pytest.ExceptionInfo, path: Path) -> None:
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg


def test_round_trip_compact_types_and_exact_at_k_equal_v(tmp_path):
    cache = TeacherCache(tmp_path, _ns(8)).open()
    views = _views(3, 8)
    cache.write_shard(views)
    fresh = TeacherCache(tmp_path, _ns(8)).open()  # another process: reads the manifest from disk
    assert len(fresh) == 3 and fresh.missing([v[0] for v in views] + ["x"]) == ["x"]
    got = fresh.get(views[1][0])
    assert torch.equal(got.ids, torch.from_numpy(views[1][1]).long())
    # float16 log-probabilities: relative rounding 2**-11 of each value
    assert torch.allclose(got.logp, torch.from_numpy(views[1][2]), rtol=2 ** -11, atol=0)
    assert fresh.hits == 1
    with pytest.raises(KeyError):
        fresh.get("0" * 64)
    assert fresh.misses == 1
    with np.load(next(tmp_path.glob("*/shard-*.npz"))) as z:
        assert z["ids"].dtype == np.uint16 and z["logp"].dtype == np.float16
    big = _ns(8, v=70000)
    assert big.id_dtype == np.uint32
    exact = TeacherCache(tmp_path, _ns(V)).open()
    views = _views(2, V)
    exact.write_shard(views)
    got = TeacherCache(tmp_path, _ns(V)).open().get(views[0][0])
    assert torch.equal(got.logp, torch.from_numpy(views[0][2])) and torch.equal(got.tail, torch.zeros(5))


def test_namespace_is_the_content_address():
    base = _ns(8)
    assert base.id == _ns(8).id
    changed = [_ns(9), _ns(8, teacher={"model.safetensors": "cd" * 32}), _ns(8, v=V + 1),
               CacheNamespace(teacher=WEIGHTS, dtype="torch.bfloat16", vocab_size=V, k=8, temperature=1.0),
               CacheNamespace(teacher=WEIGHTS, dtype="torch.float32", vocab_size=V, k=8, temperature=2.0),
               CacheNamespace(teacher=WEIGHTS, dtype="torch.float32", vocab_size=V, k=8, temperature=1.0,
                              quantize="4bit")]  # QLoRA's quantised base is another teacher
    assert len({c.id for c in changed} | {base.id}) == len(changed) + 1
    assert view_key([1, 2, 3], [2]) != view_key([1, 2, 3], [1]) != view_key([1, 2, 4], [1])


def _shard(tmp_path) -> tuple[TeacherCache, Path, str]:
    cache = TeacherCache(tmp_path, _ns(8)).open()
    views = _views(4, 8)
    cache.write_shard(views)
    return cache, next(cache.dir.glob("shard-*.npz")), views[0][0]


def test_truncated_shard_is_refused_naming_it(tmp_path):
    _, shard, key = _shard(tmp_path)
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    with pytest.raises(TeacherCacheError, match="truncated") as err:
        TeacherCache(tmp_path, _ns(8)).open().get(key)
    _one_line(err, shard)


def test_edited_shard_is_refused_naming_it(tmp_path):
    _, shard, key = _shard(tmp_path)
    data = bytearray(shard.read_bytes())
    data[-200] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(TeacherCacheError, match="sha256") as err:
        TeacherCache(tmp_path, _ns(8)).open().get(key)
    _one_line(err, shard)


def test_cache_of_another_k_or_model_is_refused(tmp_path):
    cache, _, _ = _shard(tmp_path)
    for other in (_ns(16), _ns(8, teacher={"model.safetensors": "cd" * 32})):
        moved = tmp_path / other.id  # a cache folder copied under another namespace's address
        shutil.copytree(cache.dir, moved)
        with pytest.raises(TeacherCacheError, match="another teacher or setting") as err:
            TeacherCache(tmp_path, other).open()
        _one_line(err, moved / "namespace.json")
        # a shard entry dropped into the right folder of another namespace
        shutil.rmtree(moved)
        target = TeacherCache(tmp_path, other).open()
        entry = next(cache.dir.glob("shard-*.json"))
        shutil.copy(entry, target.dir / entry.name)
        with pytest.raises(TeacherCacheError, match="another teacher cache") as err:
            TeacherCache(tmp_path, other).open()
        _one_line(err, target.dir / entry.name)
        shutil.rmtree(target.dir)


@contextlib.contextmanager
def small_disk(tmp_path: Path, size: int):
    """A folder where writing more than ``size`` bytes fails: a real tmpfs of that size when it can be
    mounted (root), else a file-size limit (RLIMIT_FSIZE: the kernel fails the write with EFBIG)."""
    folder = tmp_path / f"small-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    mounted = os.geteuid() == 0 and shutil.which("mount") and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True).returncode == 0
    if mounted:
        try:
            yield folder
        finally:
            subprocess.run(["umount", str(folder)], check=True)
        return
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, old[1]))
    try:
        yield folder
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)


def test_full_disk_during_the_pass_leaves_nothing_half_written(tmp_path):
    ns = _ns(64)
    small, big = _views(1, 64, seed=1, tokens=4), _views(8, 64, seed=2, tokens=200)
    with small_disk(tmp_path, 64 * 1024) as root:
        cache = TeacherCache(root, ns).open()
        cache.write_shard(small)  # fits
        with pytest.raises(TeacherCacheError, match="cannot write") as err:
            cache.write_shard(big)  # ~200 KB: does not
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith(str(cache.dir / "shard-"))
        names = sorted(p.name for p in cache.dir.iterdir())
        assert len(names) == 3 and not any(n.startswith(".") for n in names), names  # no temp file left
        fresh = TeacherCache(root, ns).open()
        assert len(fresh) == 1 and fresh.missing([v[0] for v in big]) == [v[0] for v in big]
        assert torch.equal(fresh.get(small[0][0]).ids, torch.from_numpy(small[0][1]).long())
