"""Run a checkpoint evaluation as its own SLURM job instead of a local process.

Same evaluator, same argv and environment as a local run (the command builder is shared); only where it
runs differs. The job's environment is exactly the job's ``env`` (``--export=NONE`` plus explicit
exports), so nothing of the trainer's distributed set-up leaks in. The callback's queue follows the job
with ``sacct`` (``squeue`` while accounting has not seen it yet) and cancels it with ``scancel``.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ifdistill.config import store_target_schema

# sacct states: finished ones map to an exit code; anything else is still running or waiting.
FAILED_STATES = {"FAILED": 1, "CANCELLED": -15, "TIMEOUT": -14, "OUT_OF_MEMORY": -9, "NODE_FAIL": 1,
                 "PREEMPTED": -15, "BOOT_FAIL": 1, "DEADLINE": -14}


@dataclass
class SlurmRunner:
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_min: int = 60
    cpus_per_task: int = 2
    mem_gb: int = 16
    gpus: int | None = None
    constraint: str | None = None
    extra_args: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)  # shell lines before the evaluator (module load ...)

    def __post_init__(self) -> None:
        for key in ("time_min", "cpus_per_task", "mem_gb"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key}: must be at least 1, got {getattr(self, key)}")
        if self.gpus is not None and self.gpus < 0:
            raise ValueError(f"gpus: must be null or at least 0, got {self.gpus}")

    def script(self, job: Any) -> str:
        lines = ["#!/bin/bash", "set -e"]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(job.env.items())
                  if k.isidentifier() and not k.startswith(("SLURM_", "BASH_FUNC"))]
        lines += list(self.setup)
        lines.append("exec " + shlex.join(job.argv))
        return "\n".join(lines) + "\n"

    def sbatch_args(self, job: Any) -> list[str]:
        args = ["sbatch", "--parsable", "--export=NONE", f"--job-name=ifdistill-eval-{job.step}",
                f"--output={job.log_path}", f"--time={self.time_min}", f"--cpus-per-task={self.cpus_per_task}",
                f"--mem={self.mem_gb}G"]
        for flag, value in (("--partition", self.partition), ("--account", self.account), ("--qos", self.qos),
                            ("--constraint", self.constraint)):
            if value:
                args.append(f"{flag}={value}")
        if self.gpus:
            args.append(f"--gpus={self.gpus}")
        return args + list(self.extra_args)

    def start(self, job: Any) -> str:
        path = Path(job.log_path).with_suffix(".sbatch")
        path.write_text(self.script(job))
        out = subprocess.run(self.sbatch_args(job) + [str(path)], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"sbatch failed for step {job.step}: {out.stderr.strip()}")
        return out.stdout.strip().split(";")[0]

    def poll(self, job: Any) -> int | None:
        state, code = job_state(job.handle)
        if state is None or state in ("PENDING", "RUNNING", "REQUEUED", "RESIZING", "SUSPENDED", "COMPLETING",
                                      "CONFIGURING"):
            return None
        if state == "COMPLETED":
            return 0
        return code if code else FAILED_STATES.get(state, 1)

    def kill(self, job: Any) -> None:
        subprocess.run(["scancel", str(job.handle)], capture_output=True, timeout=60)


# conf/callbacks/checkpoint_eval_slurm.yaml extends it
store_target_schema("slurm_runner", SlurmRunner, targets=("ifdistill.launchers.slurm_eval.SlurmRunner",))


def job_state(job_id: str) -> tuple[str | None, int | None]:
    """(state, exit code) from sacct; falls back to squeue for a job accounting has not recorded yet."""
    out = subprocess.run(["sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State,ExitCode"],
                         capture_output=True, text=True, timeout=60)
    line = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    if line:
        state, exit_code = line.split("|")
        code, _, sig = exit_code.partition(":")
        return state.split()[0], (-int(sig) if sig and int(sig) else int(code or 0))
    q = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], capture_output=True, text=True, timeout=60)
    return (q.stdout.strip() or None), None
