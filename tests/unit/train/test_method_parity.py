"""SFT and off-policy ICL distillation (online and cached teacher) compute the same batches, losses and
gradients as the code before methods became units (commit :data:`BEFORE`, the tree extracted with
``git archive`` and run in a subprocess), and their configs hash as that code's with one change: the
moved ``method._target_``. The cases: ``tests/unit/train/method_parity_case.py``. A later
change that alters a loss, a gradient or a hash on purpose moves :data:`BEFORE` to its parent commit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.unit.train.method_parity_case import CASES, HASHED, config_hashes, run_case

ROOT = Path(__file__).resolve().parents[3]
BEFORE = "3d1f4c1"  # main before ifdistill.train.method: the parity reference


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    """The cases' results computed by the code of :data:`BEFORE` (one subprocess for all cases)."""
    if shutil.which("git") is None or subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", BEFORE],
                                                     capture_output=True).returncode != 0:
        pytest.fail(f"commit {BEFORE} is not in this clone's history: the parity test needs it (fetch it)")
    tree = tmp_path_factory.mktemp("before")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE, "ifdistill", "conf", "callbacks"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    shutil.copy(Path(__file__).with_name("method_parity_case.py"), tree / "method_parity_case.py")
    out = tree / "results.pt"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, str(tree / "method_parity_case.py"), str(out)], env=env, cwd=tree,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out)


def test_the_reference_runs_the_code_before_the_move(before, tmp_path):
    """The subprocess imported the archived tree, not this checkout (which it would find installed)."""
    assert Path(before["ifdistill"]).resolve().parent.parent.name.startswith("before")
    assert Path(before["ifdistill"]).resolve().parent != (ROOT / "ifdistill").resolve()


@pytest.mark.parametrize("name", list(CASES))
def test_losses_and_gradients_equal_the_code_before(before, name):
    old, new = before[name], run_case(name)
    # Both versions run the same float operations in the same order on one thread (method_parity_case),
    # so any difference is a difference of code: exact equality is the tolerance.
    assert old["batch"].keys() == new["batch"].keys()
    for key in old["batch"]:
        assert torch.equal(old["batch"][key], new["batch"][key]), key
    assert torch.equal(old["loss"], new["loss"]) and new["loss"].item() > 0
    assert old["grads"].keys() == new["grads"].keys() and new["grads"]
    for key in old["grads"]:
        assert torch.equal(old["grads"][key], new["grads"][key]), key


def test_config_hashes_change_by_the_moved_target_alone(before):
    """Moving SFT and distillation into ``ifdistill/methods/`` renamed their ``_target_``: each config's
    hash now equals the old code's hash of the same config with only ``method._target_`` renamed
    (``MOVED``), and differs from the old hash (runs started before get a new directory)."""
    assert before["hashes"].keys() == before["hashes_moved"].keys() == HASHED.keys()
    now = config_hashes()
    assert now == before["hashes_moved"]
    assert all(now[name] != before["hashes"][name] for name in HASHED)
