"""The run directory: named by a hash of what is trained, so the same command finds (and resumes) its run.

``config_hash`` is the sha256 of the resolved config with the keys that do not change the trained
weights removed -- paths (where things go), loggers and logging cadence, Hydra's own node, the
``run`` section (resume policy, checkpoint and evaluation cadence) and callbacks -- serialised as
canonical JSON (sorted keys). Two invocations that train the same thing therefore get the same hash
wherever they write and however they log; change a learning rate, a seed, the data or the strategy
and the hash changes. The ignored keys are listed in ``run.hash_ignore`` (dotted paths, ``*`` allowed
as the last component) and recorded in ``run.json`` next to the hash.

Layout of ``<paths.output_root>/<task_name>/runs/<run_id>/`` (``run_id = <run.name>-<hash[:12]>``)::

    config.yaml          the resolved config (with paths), rewritten at every launch
    run.json             run_id, config_hash, hash_ignore, the hashed config, and one entry per launch
                         (time, host, pid, resumed_from; finished + final_step when it reached the end)
    checkpoints/         Lightning checkpoints: step=000200.ckpt ... (files, or folders for DeepSpeed/FSDP2)
    exports/             HF-format exports for the checkpoint-eval callback (exports/step_000200/)
    logs/                csv/ and wandb/ loggers
    data/                the data manifest

A callback finds everything from the trainer: ``run_dir_of(trainer)`` (set by :func:`train`) or by
reading ``run.json`` in the parent of ``checkpoints/``.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import hashlib
import json
import os
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

DEFAULT_HASH_IGNORE = (
    "paths", "hydra", "logger", "callbacks", "run", "task_name",
    "trainer.enable_progress_bar", "trainer.enable_model_summary", "trainer.log_every_n_steps",
)
RUN_JSON = "run.json"
SUBDIRS = ("checkpoints", "exports", "logs", "data")


def _drop(node: Any, path: list[str]) -> None:
    if not isinstance(node, dict) or not path:
        return
    head, rest = path[0], path[1:]
    for key in [k for k in node if fnmatch.fnmatchcase(str(k), head)]:
        if rest:
            _drop(node[key], rest)
        else:
            del node[key]


def hashed_config(cfg: DictConfig | Mapping[str, Any], ignore: Iterable[str] = DEFAULT_HASH_IGNORE) -> dict[str, Any]:
    """The part of the resolved config that determines the trained weights (a plain dict).

    Ignored top-level sections are skipped *before* resolving, so values that only resolve inside a
    Hydra run (``paths.output_dir: ${hydra:runtime.output_dir}``) never have to resolve here.
    """
    ignore = list(ignore)
    top = [d for d in ignore if "." not in d]
    if isinstance(cfg, DictConfig):
        out: dict[str, Any] = {}
        for key in cfg.keys():
            if any(fnmatch.fnmatchcase(str(key), pat) for pat in top):
                continue
            node = cfg[key]
            out[str(key)] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
    else:
        out = json.loads(json.dumps(dict(cfg), default=str))
    for dotted in ignore:
        _drop(out, dotted.split("."))
    return out


def config_hash(cfg: DictConfig | Mapping[str, Any], ignore: Iterable[str] = DEFAULT_HASH_IGNORE) -> str:
    """sha256 (hex) of the canonical JSON of :func:`hashed_config`."""
    blob = json.dumps(hashed_config(cfg, ignore), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def run_id(name: str, digest: str) -> str:
    return f"{name}-{digest[:12]}"


class RunDir:
    """Paths inside one run directory (creating nothing until :meth:`create`)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    checkpoints = property(lambda self: self.root / "checkpoints")
    exports = property(lambda self: self.root / "exports")
    logs = property(lambda self: self.root / "logs")
    data = property(lambda self: self.root / "data")
    config_yaml = property(lambda self: self.root / "config.yaml")
    run_json = property(lambda self: self.root / RUN_JSON)

    def create(self) -> RunDir:
        for sub in SUBDIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        return self

    def read_meta(self) -> Optional[dict[str, Any]]:
        return json.loads(self.run_json.read_text()) if self.run_json.is_file() else None

    def write_launch(self, cfg: DictConfig, *, run_id: str, digest: str, ignore: Iterable[str],
                     resumed_from: Optional[str]) -> dict[str, Any]:
        """Write ``config.yaml`` and add this launch to ``run.json`` (atomically; rank 0 only)."""
        self.create()
        meta = self.read_meta() or {"run_id": run_id, "config_hash": digest, "hash_ignore": list(ignore),
                                    "hashed_config": hashed_config(cfg, ignore), "launches": []}
        if meta["config_hash"] != digest:
            raise RuntimeError(f"{self.root} belongs to config_hash {meta['config_hash']}, not {digest}")
        meta["launches"].append({"time": _now(),
                                 "resumed_from": resumed_from, "pid": os.getpid(), "host": socket.gethostname()})
        _atomic_write(self.config_yaml, OmegaConf.to_yaml(_resolved_where_possible(cfg)))
        _atomic_write(self.run_json, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
        return meta

    def mark_finished(self, final_step: int) -> None:
        """Record that the current launch reached the end of training (``ifdistill-status`` reads it)."""
        self._update_launch(finished=_now(), final_step=int(final_step))

    def mark_stopped(self, step: int, reason: str) -> None:
        """Record that the current launch stopped early for a requeue (checkpoint of ``step`` saved)."""
        self._update_launch(stopped=_now(), stopped_at_step=int(step), stop_reason=reason)

    def _update_launch(self, **fields: Any) -> None:
        meta = self.read_meta()
        if meta and meta.get("launches"):
            meta["launches"][-1].update(fields)
            _atomic_write(self.run_json, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _resolved_where_possible(cfg: DictConfig) -> dict[str, Any]:
    """The config resolved section by section; a section that cannot resolve outside Hydra
    (``paths.output_dir: ${hydra:...}`` in tests that call train() directly) is kept as written."""
    out: dict[str, Any] = {}
    for key in cfg.keys():
        try:
            node = cfg[key]
            out[str(key)] = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node
        except Exception:  # omegaconf raises several interpolation errors
            out[str(key)] = OmegaConf.to_container(cfg, resolve=False)[key]
    return out


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run_dir_of(trainer: Any) -> Optional[RunDir]:
    """The :class:`RunDir` a trainer built by :func:`ifdistill.train.run.train` writes to."""
    root = getattr(trainer, "ifdistill_run_dir", None)
    return RunDir(root) if root is not None else None
