"""Hydra multirun sweeps: job and run names from the swept values, the swept values each run logs
(``sweep/<key>``, what the W&B view groups by), and one guard.

``ifdistill-train -m experiment=ifeval_replay_sweep [hydra/launcher=slurm]`` runs one training per
combination of the preset's ``hydra.sweeper.params``. Each run is named by *what was swept*
(``ratio-0.05_method-distill_seed-1``, the ``ifdistill.sweep_name`` resolver, :func:`sweep_name`), not
by every override on the command line, so the names stay short and a W&B panel grouped by name reads like
the sweep's table. The run id stays
``<name>-<config_hash[:12]>`` (:mod:`ifdistill.train.rundir`), so names never need to be unique by
themselves and a requeued job finds its run again.

A failed job of a sweep whose jobs share one process (the local launcher) prints its line naming the
job and returns, so the sweep's other jobs run; :class:`SweepOutcome` (a Hydra callback,
``conf/hydra/default.yaml``) ends the sweep with a line counting the failed jobs and a non-zero exit. On
a launcher with a process per job (SLURM's) the job's process exits with its code, as a single run does.

The guard: Hydra multirun with more than one device per job on the local (basic) launcher would let
Lightning start the other ranks by re-running the command line -- and each of them re-runs the *whole
sweep* (../shared/notes/slurm-localhost.md). Multi-device sweeps go through ``hydra/launcher=slurm``
(one task per device, srun starts the ranks), or a loop of single runs.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Mapping
from typing import Any

from hydra.experimental.callback import Callback

from ifdistill.config import register_resolvers

SWEEP_PREFIX = "sweep/"  # swept values in the W&B run config: sweep/<last key component>


def _hydra() -> Any:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get() if HydraConfig.initialized() else None


def run_config_key(key: str) -> str:
    """A swept key's name in the run config: its last component, as in the sweep's run names."""
    return SWEEP_PREFIX + str(key).split(".")[-1]


def _hydra_cfg(cfg: Mapping[str, Any]) -> Any:
    """The config's own ``hydra`` node (a config composed with it) or the running job's."""
    return cfg["hydra"] if "hydra" in cfg else _hydra()


def swept_keys(cfg: Mapping[str, Any]) -> list[str]:
    """The config keys the sweep preset sweeps (``hydra.sweeper.params``), in their order."""
    hydra = _hydra_cfg(cfg)
    params = hydra["sweeper"].get("params") if hydra is not None else None
    return [str(k) for k in (params or {}).keys()]


def swept_values(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``{"sweep/ratio": 0.05, "sweep/method": "distill", "sweep/seed": 1}``: each swept key's value in
    this run (``cfg``: a config tree, resolved), under its short name. A config group (``method``) gives its
    chosen option's name; other keys their value. Empty outside a sweep preset."""
    from ifdistill.config import lookup

    hydra = _hydra_cfg(cfg)
    choices = dict(hydra["runtime"]["choices"]) if hydra is not None and "runtime" in hydra else {}
    out = {}
    for key in swept_keys(cfg):
        value = choices[key] if key in choices else lookup(cfg, key)
        if run_config_key(key) in out:
            raise ValueError(f"hydra.sweeper.params: {key!r} and another swept key share the name {run_config_key(key)!r}")
        out[run_config_key(key)] = value
    return out


def check_launch(trainer: Mapping[str, Any]) -> None:
    """Refuse Hydra multirun + Lightning-launched multi-process training on the basic launcher."""
    from hydra.types import RunMode

    hydra = _hydra()
    if hydra is None or hydra.mode != RunMode.MULTIRUN:
        return
    if "submitit" in str(hydra.launcher.get("_target_", "")):
        return
    devices = trainer.get("devices", 1)
    if _device_count(devices) * int(trainer.get("num_nodes", 1) or 1) > 1:
        raise ValueError(
            f"Hydra multirun (-m) with trainer.devices={devices} on the {hydra.launcher._target_} launcher: "
            "Lightning would start the other ranks by re-running this command line, and each would re-run "
            "the whole sweep. Sweep multi-device runs with hydra/launcher=slurm (one task per device) or "
            "run them one by one without -m.")


def _device_count(devices: Any) -> int:
    if isinstance(devices, int) and devices > 0:
        return devices
    if isinstance(devices, str) and devices not in ("auto", "-1"):
        return len([d for d in devices.split(",") if d.strip()]) if "," in devices else int(devices)
    if not isinstance(devices, (int, str)):  # a list of device indices
        return len(devices)
    import torch  # "auto" / -1: every visible GPU, one CPU process

    return max(1, torch.cuda.device_count())


def jobs_share_process() -> bool:
    """True in a multirun whose launcher runs the jobs one after another in this process (the local,
    basic launcher); False for a single run and for a launcher with a process per job (submitit)."""
    from hydra.types import RunMode

    hydra = _hydra()
    return hydra is not None and hydra.mode == RunMode.MULTIRUN and "submitit" not in str(hydra.launcher.get("_target_", ""))


def job_label() -> str | None:
    """``job 2 (data.ratio=0.5 method=distill seed=1)``: a sweep job's number and the overrides of the
    keys the sweep varies (every override when the preset sweeps none); ``None`` outside a multirun."""
    from hydra.types import RunMode

    hydra = _hydra()
    if hydra is None or hydra.mode != RunMode.MULTIRUN:
        return None
    overrides = [str(o) for o in hydra.overrides.task]
    keys = set(swept_keys(hydra))
    chosen = [o for o in overrides if o.partition("=")[0].lstrip("+~") in keys] or overrides
    return f"job {hydra.job.num} ({' '.join(chosen)})"


_FAILED_JOBS: list[tuple[str, int]] = []  # (job label, exit code) of this process's failed sweep jobs


def record_failed_job(label: str, exit_code: int) -> None:
    _FAILED_JOBS.append((label, int(exit_code)))


class SweepOutcome(Callback):
    """Ends a multirun whose jobs shared this process: a line counting the jobs that failed (each printed
    its own line when it failed) and the exit code of the first failure (2: an input or setting to fix,
    3: a divergence); nothing when every job succeeded."""

    def __init__(self) -> None:
        self.jobs = 0

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        _FAILED_JOBS.clear()
        self.jobs = 0

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        self.jobs += 1

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        if not _FAILED_JOBS:
            return
        import sys

        print(f"ifdistill-train: {len(_FAILED_JOBS)} of {self.jobs} sweep jobs failed: "
              f"{'; '.join(label for label, _ in _FAILED_JOBS)}", file=sys.stderr, flush=True)
        raise SystemExit(_FAILED_JOBS[0][1])


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_NOT_NAMING = ("experiment", "paths.", "hydra.", "hydra/")
_MAX_NAME = 120


def sweep_name(overrides: Any, params: Any = None) -> str:
    """A job's name from its overrides: only the keys the sweep preset sweeps (``hydra.sweeper.params``)
    when it has any, else every override except paths, hydra's own and the experiment.

    ``["data.ratio=0.05", "method=distill", "x=1"]`` with params ``data.ratio, method`` ->
    ``ratio-0.05_method-distill``: each part is the key's last component and the value, made safe for
    directory names and W&B ids, in the order of the params. A name longer than 120 characters keeps
    its start and gets a hash of the whole (file names are limited to 255 bytes)."""
    values: dict[str, str] = {}
    for item in overrides or []:
        key, sep, value = str(item).partition("=")
        if sep:
            values[key.lstrip("+~")] = value
    keys = [str(k) for k in (params or {}).keys()]
    chosen = [k for k in keys if k in values] if keys else sorted(
        k for k in values if not k.startswith(_NOT_NAMING))
    name = _UNSAFE.sub("-", "_".join(f"{k.split('.')[-1]}-{values[k]}" for k in chosen)).strip("-") or "run"
    if len(name) > _MAX_NAME:
        name = f"{name[:_MAX_NAME - 9]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return name


def slurm_gpus(accelerator: str, devices: Any) -> Any:
    """Resolver for the slurm launcher's ``gpus_per_node``: the trainer's devices unless it runs on CPU."""
    return None if str(accelerator) == "cpu" else devices


LAUNCH_ID_ENV = "IFDISTILL_LAUNCH_ID"


def launch_id() -> str:
    """This launch's id in its Hydra job folder's name (``jobs/<second>_<id>``): the launching process's pid
    and 4 random hex digits, so two launches in one second, on one host or several sharing the folder,
    never share a job folder. Kept in the environment: the processes a launch starts (DDP ranks, SLURM
    jobs of a sweep) resolve the same folder."""
    if not os.environ.get(LAUNCH_ID_ENV):
        os.environ[LAUNCH_ID_ENV] = f"{os.getpid()}-{secrets.token_hex(2)}"
    return os.environ[LAUNCH_ID_ENV]


def _basename(path: Any) -> str:
    return os.path.basename(str(path).rstrip("/"))


register_resolvers({
    # A sweep job's name from the values swept, its W&B group from the sweep folder, a launch's job folder
    # (conf/hydra/default.yaml), and the SLURM launcher's GPUs (conf/hydra/launcher/slurm.yaml).
    "ifdistill.sweep_name": sweep_name,
    "ifdistill.basename": _basename,
    "ifdistill.launch_id": launch_id,
    "ifdistill.slurm_gpus": slurm_gpus,
})
