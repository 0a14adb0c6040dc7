"""``make demo`` whose training fails ends with one line naming the failed step and where its output is,
and training's exit code -- not demo.py's own traceback (ifdistill/cli/demo.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ifdistill.console import LOG_FILE


def test_a_failed_training_is_one_line_naming_the_step(tmp_path):
    # a key no config has: ifdistill-train refuses it as it composes (one line, exit 2), before any run exists
    done = subprocess.run([sys.executable, "-m", "ifdistill.cli.demo", f"--out={tmp_path}", "model=tiny",
                           "nosuchkey=1"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "CalledProcessError" not in done.stderr, done.stderr[-2000:]
    assert lines[-2].startswith("ifdistill-train: error: ") and "nosuchkey" in lines[-2]  # training's own line
    assert lines[-1] == ("[demo] training with in-training evaluations failed (exit 2); "
                         "its error is the line above")


def test_the_failed_run_is_named_by_the_log_training_wrote(tmp_path):
    from ifdistill.cli.demo import newest_run_log

    since = time.time() - 1
    runs = tmp_path / "train" / "runs"
    old, new = runs / "demo-aaa" / "logs" / LOG_FILE, runs / "demo-bbb" / "logs" / LOG_FILE
    for log in (old, new):
        log.parent.mkdir(parents=True)
        log.write_text("...\n")
    os.utime(old, (since - 60, since - 60))  # a run of an earlier launch
    assert newest_run_log(tmp_path, "demo", since) == new
    assert newest_run_log(tmp_path, "demo_smollm2", since) is None
    os.utime(new, (since - 60, since - 60))
    assert newest_run_log(tmp_path, "demo", since) is None  # training stopped before it wrote a log
