"""A run's resolved config, and the *grouping hash* that puts seed replicates of one setup together.

Why a hash of our own and not the run's ``config_hash``: ``config_hash`` (:mod:`ifdistill.runs.rundir`)
identifies what is trained and covers the seed, so replicates of one setup carry different hashes.
The report needs "same setup, different seed" -- the config without the seed and without everything
that only says where files go, how they are logged or when they are evaluated, none of which can
change the trained weights.

Which config: ``run.json``'s ``hashed_config`` (the config training hashed, already without paths,
loggers, callbacks and the ``run`` section) when present; else ``config.yaml`` (training's resolved
config); else Hydra's ``.hydra/config.yaml`` (read unresolved: ``${seed}`` stays the same string
across replicates); else metrics.json's ``config``.

Ignored by :func:`grouping_hash` (the complete list; anything else counts):

- everything training's own hash ignores (:data:`ifdistill.runs.rundir.HASH_IGNORE`, the one list of keys
  that cannot change the trained weights: paths, hydra, logger, callbacks, eval, run, task_name and
  the trainer's display settings);
- any key named ``seed`` or ``order_seed`` at any depth (``seed``, ``data.seed``, ``data.order_seed``,
  which follows the run's seed): the replicate;
- top-level ``loggers``, ``wandb``, ``sweep``, ``job``: the same kinds of section under the names
  other tools' configs use (Hydra's sweep and job settings, with timestamps);
- keys named ``config_hash``, ``output_dir``, ``log_dir``, ``save_dir``, ``dirpath``, ``run_dir``,
  ``wandb_dir``, ``run_name``, ``run_id`` at any depth.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Candidate files, first found wins: what training writes (resolved), then Hydra's own copy.
CONFIG_FILES = ("run.json", "config.yaml", ".hydra/config.yaml")

IGNORED_ANY_DEPTH = frozenset({
    "seed", "order_seed", "config_hash", "output_dir", "log_dir", "save_dir", "dirpath", "run_dir", "wandb_dir",
    "run_name", "run_id",
})
IGNORED_TOP_LEVEL = frozenset({"loggers", "wandb", "sweep", "job"})


def _load_yaml(path: Path) -> dict:
    from omegaconf import OmegaConf

    loaded = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    return loaded if isinstance(loaded, dict) else {}


def read_config(run_dir: str | os.PathLike) -> tuple[dict, str | None, Path | None]:
    """``(config, config_hash, file)`` of a run directory; ``({}, None, None)`` when none is found.

    ``run.json`` (training's) holds ``{"hashed_config": {...}, "config_hash": ...}``; a ``"config"``
    entry or a plain config are accepted too.
    """
    run_dir = Path(run_dir)
    for name in CONFIG_FILES:
        file = run_dir / name
        if not file.is_file():
            continue
        if file.suffix == ".json":
            data = json.loads(file.read_text())
            for key in ("hashed_config", "config"):
                if isinstance(data.get(key), Mapping):
                    return dict(data[key]), data.get("config_hash"), file
            return data, data.get("config_hash"), file
        data = _load_yaml(file)
        return data, data.get("config_hash") if isinstance(data.get("config_hash"), str) else None, file
    return {}, None, None


def prune(config: Mapping[str, Any]) -> dict:
    """``config`` without the ignored keys (see the module docstring), recursively."""
    from ifdistill.runs.rundir import HASH_IGNORE, hashed_config

    return _drop_named({k: v for k, v in hashed_config(config, HASH_IGNORE).items() if k not in IGNORED_TOP_LEVEL})


def _drop_named(config: Mapping[str, Any]) -> dict:
    return {key: _drop_named(value) if isinstance(value, Mapping) else value
            for key, value in config.items() if key not in IGNORED_ANY_DEPTH}


def grouping_hash(config: Mapping[str, Any]) -> str:
    """12 hex digits of sha256 over the pruned config as canonical JSON (sorted keys).

    Two runs get the same value exactly when their configs are equal after :func:`prune`.
    """
    blob = json.dumps(prune(config), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def differing_keys(configs: list[Mapping[str, Any]], limit: int = 8) -> list[str]:
    """Flattened, non-ignored keys whose values are not the same in all ``configs`` (sorted).

    These are the "key config values" of a comparison: what distinguishes the rows, seed excluded
    (the seed has its own column).
    """
    flats = [flatten(prune(c)) for c in configs if c]
    if len(flats) < 2:
        return []
    keys = sorted(set().union(*flats))
    differing = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in flats}) > 1]
    return differing[:limit]
