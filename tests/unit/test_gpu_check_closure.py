"""The GPU kit's wheel list (``scripts/gpu_check.py --print-requirements --closure``) follows the extras a
parent asks for: lm-eval needs ``pytablewriter``, which needs ``typepy[datetime]``, whose ``pytz`` is
declared only under that extra -- a list without it stops the offline install on the GPU machine
("No matching distribution found for pytz", seen on a lent H100)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import distribution
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kit = _load_gpu_check()


def _names(pins: list[str]) -> set[str]:
    return {kit.normalize(kit._name(p)) for p in pins}


def test_an_extra_asked_by_a_parent_brings_its_requirements():
    # typepy's own metadata: what only its "datetime" extra requires
    reqs = [Requirement(r) for r in distribution("typepy").requires]
    only_datetime = {kit.normalize(r.name) for r in reqs if r.marker is not None
                     and r.marker.evaluate({"extra": "datetime"}) and not r.marker.evaluate({"extra": ""})}
    assert "pytz" in only_datetime
    plain, with_extra = _names(kit.closure(["typepy"])), _names(kit.closure(["typepy[datetime]"]))
    assert "pytz" not in plain and only_datetime <= with_extra
    assert "pytz" in _names(kit.closure(["lm-eval==0.4.13"]))  # through pytablewriter -> typepy[datetime]


def test_the_kit_brings_trl_and_liger_kernel_pinned_even_where_liger_is_not_installed(monkeypatch):
    # the benchmark's TRL rows and kernels.liger need them on the GPU machine (each wheel < 1 MiB: the list stays
    # one 64 MiB part)
    pins = {kit.normalize(kit._name(p)): p for p in kit.requirements()}
    assert pins["trl"].startswith("trl==") and pins["liger-kernel"].startswith("liger-kernel==")
    import importlib.metadata as md

    real = md.distribution

    def without_liger(name):
        if kit.normalize(name) == "liger-kernel":
            raise md.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(md, "distribution", without_liger)  # a CPU set-up: no gpu extra
    assert pins["liger-kernel"] in kit.closure([pins["liger-kernel"]])
    import pytest

    with pytest.raises(SystemExit, match="is needed but not installed here"):
        kit.closure(["no-such-distribution==1.0"])
