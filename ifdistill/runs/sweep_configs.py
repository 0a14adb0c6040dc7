"""The configs of runs that exist, read back from disk: a sweep's jobs, one job, one run.

A view of a sweep (``ifdistill-wandb-view``) describes the runs the sweep made, so it reads what each
job composed -- the job directory's ``.hydra/config.yaml`` with its ``.hydra/hydra.yaml`` (overrides,
sweeper params, sweep directory) -- rather than composing a config anew from a command line, which
would describe the preset's defaults instead of the sweep's (its data sources, its benchmarks, its
swept values). A sweep still running is read from the jobs present.

What a path may name, recognised by what it holds:

- a sweep directory: its job directories ``<num>_<name>/`` with ``.hydra/``, in job order;
- a job directory (``.hydra/config.yaml``), or that file itself;
- a training run directory (``run.json``; its ``config.yaml``, resolved, has no Hydra node), or a
  run's ``config.yaml``.

Every problem is a :class:`SweepConfigError` naming the path: the CLIs print it as one line, exit 2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

JOB_CONFIG = Path(".hydra") / "config.yaml"
JOB_HYDRA = Path(".hydra") / "hydra.yaml"
_JOB_NUM = re.compile(r"^(\d+)_")


class SweepConfigError(ValueError):
    """A path that names no sweep, job or run, or a saved config that cannot be read."""


def looks_like_path(arg: str) -> bool:
    """A command-line word that names a file or folder rather than a Hydra override (``key=value``)."""
    return "=" not in arg.split("/")[0] or Path(arg).exists()


def _load_yaml(path: Path) -> DictConfig:
    try:
        cfg = OmegaConf.load(path)
    except Exception as err:  # noqa: BLE001 - yaml and omegaconf raise several types
        raise SweepConfigError(f"{path}: not a readable config ({' '.join(str(err).split())[:200]})") from None
    if not isinstance(cfg, DictConfig):
        raise SweepConfigError(f"{path}: not a config mapping")
    return cfg


def job_config(job_dir: Path) -> DictConfig:
    """One job's composed config with its ``hydra`` node, as Hydra saved it (interpolations unresolved:
    :func:`activate` lets ``${hydra:...}`` resolve against this job)."""
    from hydra.conf import HydraConf

    cfg = _load_yaml(job_dir / JOB_CONFIG)
    if (job_dir / JOB_HYDRA).is_file():
        saved = _load_yaml(job_dir / JOB_HYDRA)
        schema = OmegaConf.structured(HydraConf)
        node = saved.get("hydra", saved)
        fields = HydraConf.__dataclass_fields__  # keys Hydra saves beside its schema (env) are dropped
        known = {k: node[k] for k in node if k in fields}
        try:  # typed as Hydra's schema, as HydraConfig requires
            hydra = OmegaConf.merge(schema, OmegaConf.create(known))
        except Exception as err:  # noqa: BLE001 - omegaconf's validation errors
            raise SweepConfigError(f"{job_dir / JOB_HYDRA}: not a Hydra config ({' '.join(str(err).split())[:200]})") from None
        OmegaConf.set_struct(cfg, False)
        cfg["hydra"] = hydra
    return cfg


def activate(cfg: DictConfig) -> DictConfig:
    """Make ``cfg`` the current Hydra config so that its ``${hydra:...}`` interpolations (run name and
    W&B group of a sweep preset) resolve as they did in its job."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import setup_globals

    import ifdistill.config  # noqa: F401  (registers the resolvers the configs use: the shared data folder,
    import ifdistill.runs.sweeps  # noqa: F401  a sweep's job and run names)

    setup_globals()  # Hydra's own resolvers (hydra:, now:), registered by Hydra's entry points
    if "hydra" in cfg:
        HydraConfig.instance().set_config(cfg)
    return cfg


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The job directories of a sweep present now, in job order."""
    jobs = [p for p in sweep_dir.iterdir() if p.is_dir() and (p / JOB_CONFIG).is_file()]
    return sorted(jobs, key=lambda p: (int(m.group(1)) if (m := _JOB_NUM.match(p.name)) else 1 << 30, p.name))


def read_configs(path: str | Path) -> list[DictConfig]:
    """The configs of the jobs or run that ``path`` names (see the module docstring), in job order."""
    p = Path(path)
    if not p.exists():
        raise SweepConfigError(f"{p}: no such file or directory (expected a sweep, job or run directory)")
    if p.is_file():
        if p.parent.name == ".hydra":
            return [job_config(p.parent.parent)]
        return [_load_yaml(p)]
    if (p / JOB_CONFIG).is_file():
        return [job_config(p)]
    if (p / "run.json").is_file() and (p / "config.yaml").is_file():
        return [_load_yaml(p / "config.yaml")]
    jobs = job_dirs(p)
    if not jobs:
        raise SweepConfigError(f"{p}: holds no job of a sweep (<num>_<name>/.hydra/config.yaml), no job config "
                               "and no training run (run.json)")
    return [job_config(j) for j in jobs]


def select(cfg: DictConfig, key: str, default: Any = None) -> Any:
    """``OmegaConf.select`` with the job's Hydra config active; ``default`` when the value cannot resolve
    (a run's resolved config.yaml keeps no ``hydra`` node)."""
    activate(cfg)
    try:
        return OmegaConf.select(cfg, key, default=default, throw_on_missing=False)
    except Exception:  # noqa: BLE001 - an interpolation that cannot resolve outside its job
        return default
