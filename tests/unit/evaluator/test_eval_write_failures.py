"""``ifdistill-eval`` whose output folder is on a full filesystem (a real tmpfs): one line naming the
folder and the free space, exit 2, and nothing half-written there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import small_filesystem

SMALL = ["eval=ifeval_local", "eval.backend=hf", "eval.data.max_examples=1", "eval.generation.max_new_tokens=4",
         "eval.runtime.progress=false"]


@pytest.mark.slow  # one ifdistill-eval process (the tiny model, one prompt)
def test_results_on_a_full_disk_are_one_line_exit_2_and_nothing_half_written(tmp_path):
    fs = tmp_path / "fs"
    with small_filesystem(fs, 64 * 1024):
        with open(fs / "filler", "wb", buffering=0) as f:  # the filesystem full
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        out = fs / "out"
        done = subprocess.run([str(Path(sys.executable).parent / "ifdistill-eval"), *SMALL, f"output_dir={out}",
                               f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        left = sorted(p.name for p in fs.iterdir())
    assert done.returncode == 2, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"ifdistill-eval: error: no space left to write a file under {out} ("), line
    assert line.endswith(" MiB free on that filesystem); free space and re-run the same command"), line
    assert "Traceback" not in done.stderr
    assert left == ["filler"], left  # no results.json, samples or temp folder
