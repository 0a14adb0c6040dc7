"""The one-node SLURM these tests submit to (started by .ci/run; by hand: ../shared/tools/slurm-localhost start)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support import require


@pytest.fixture(scope="session")
def slurm():
    ok = shutil.which("sinfo") is not None and subprocess.run(
        ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout.strip() in ("idle", "mixed", "allocated")
    require(ok, "no running SLURM (start one with ../shared/tools/slurm-localhost start)")
