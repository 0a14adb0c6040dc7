"""Evaluations as SLURM jobs on a real one-node SLURM: results collected, failures and retries seen."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ifdistill.callbacks.eval_jobs import EvalJob, EvalQueue
from ifdistill.launchers.slurm_eval import SlurmRunner
from tests.support import require

pytestmark = [pytest.mark.slurm]

FAKE = r"""
import os, sys, pathlib
out = pathlib.Path(sys.argv[1])
if sys.argv[2] == "fail":
    print("failing on purpose", file=sys.stderr); sys.exit(7)
assert "RANK" not in os.environ and os.environ.get("IFDISTILL_MARK") == "yes"
out.mkdir(parents=True, exist_ok=True)
(out / "results.json").write_text('{"job": "%s"}' % os.environ.get("SLURM_JOB_ID"))
"""


@pytest.fixture(scope="module")
def slurm():
    ok = shutil.which("sinfo") is not None and subprocess.run(
        ["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout.strip() in ("idle", "mixed", "allocated")
    require(ok, "no running SLURM (start one with ../shared/tools/slurm-localhost start)")


def _job(tmp_path: Path, step: int, mode: str) -> EvalJob:
    script = tmp_path / "fake.py"
    script.write_text(FAKE)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK",)}
    env["IFDISTILL_MARK"] = "yes"
    out = tmp_path / "evals" / f"step_{step:06d}"
    return EvalJob(step, tmp_path, out, [sys.executable, str(script), str(out), mode], env)


def test_eval_job_runs_under_slurm_and_results_come_back(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")  # the trainer's variables must not reach the job
    q = EvalQueue(runner=SlurmRunner(time_min=5, cpus_per_task=1, mem_gb=1), poll_interval_s=0.5, retries=0)
    q.submit(_job(tmp_path, 100, "ok"))
    events = q.drain(120)
    assert [(e.kind, e.job.step) for e in events] == [("ok", 100)], [e.log_tail for e in events]
    assert '"job": "' in (tmp_path / "evals" / "step_000100" / "results.json").read_text()


def test_failed_slurm_job_is_retried_then_given_up(slurm, tmp_path):
    q = EvalQueue(runner=SlurmRunner(time_min=5, cpus_per_task=1, mem_gb=1), poll_interval_s=0.5, retries=1)
    q.submit(_job(tmp_path, 200, "fail"))
    events = q.drain(120)
    assert [e.kind for e in events] == ["failed", "gave_up"]
    assert events[0].exit_code == 7 and "failing on purpose" in events[0].log_tail
