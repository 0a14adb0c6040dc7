"""A training run's directory: every path in it, and the config hash that names it.

The run directory is named by a hash of what is trained, so the same command finds (and resumes) its
run. ``config_hash`` is the sha256 of the resolved config with the keys that cannot change the trained
weights removed, serialised as canonical JSON (sorted keys). :data:`HASH_IGNORE` is the one list of
those keys (dotted paths, ``*`` allowed as the last component): where files go (``paths``), Hydra's
own node, loggers, callbacks, the ``eval`` section (what is measured, not what is trained), the
``run`` section (resume policy, checkpoint and evaluation cadence), ``task_name``, the trainer's
display settings and ``kernels`` (compiled layers and fused kernels compute the same step up to float
rounding: docs/gpu.md says why that is kept out of the hash). ``run.hash_ignore`` may replace the list for one run; the list used is recorded in
``run.json`` next to the hash. Two invocations that train the same thing get the same hash wherever
they write, however they log and whatever they evaluate; change a learning rate, a seed, the data or
the strategy and the hash changes. The report's grouping of seed replicates
(:func:`ifdistill.results.run_config.grouping_hash`) starts from the same list.

Layout of ``<paths.output_root>/<task_name>/runs/<run_id>/`` (``run_id = <run.name>-<hash[:12]>``);
:class:`RunDir` names each path, and nothing else in the package spells them::

    run.lock             who trains here now (host, pid, start time); ifdistill.train.run_lock
    config.yaml          the resolved config (with paths), rewritten at every launch
    run.json             run_id, config_hash, hash_ignore, the hashed config, and one entry per launch
                         (time, host, pid, resumed_from; finished + final_step when it reached the end,
                         diverged when it stopped on a non-finite value)
    metrics.json         every checkpoint evaluation and failure (ifdistill.results.run_metrics)
    checkpoints/         Lightning checkpoints: step=000200.ckpt ... (files, or folders for DeepSpeed/FSDP2)
    exports/step_000200/ HF-format exports for the checkpoint evaluations (export.json written last)
    evals/step_000200/   the evaluator's output for that export (results.json, samples.jsonl, .request/)
    evals/ifbench/step_000200/  an extra benchmark's output for it (callbacks.checkpoint_eval.evals)
    logs/                csv/ and wandb/ loggers
    data/manifest.json   the data manifest
    report/              ifdistill-report's tables and plots

A sweep's Hydra job directory holds ``run_dir.txt`` (:data:`RUN_DIR_LINK`) naming the run it trained.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import fnmatch
import hashlib
import json
import os
import re
import shutil
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from ifdistill.config import ConfigError
from ifdistill.paths import atomic_leftovers, write_json_atomic, write_text_atomic

HASH_IGNORE = (
    "paths", "hydra", "logger", "callbacks", "eval", "run", "task_name",
    "trainer.enable_progress_bar", "trainer.enable_model_summary", "trainer.log_every_n_steps",
    "method.cache_dir",  # where the teacher cache lives, not what it holds (its content is addressed)
    "method.cache_views_per_shard", "method.cache_claim_expiry_s",  # how jobs share the pass, not its numbers
    # how the same step is executed (compiled layers, fused kernels): its losses and gradients equal the eager
    # step's within float rounding (tests/unit/train/test_compiled_step.py; docs/gpu.md)
    "kernels",
)
RUN_JSON = "run.json"
CONFIG_YAML = "config.yaml"
RUN_LOCK = "run.lock"
METRICS_JSON = "metrics.json"
RUN_DIR_LINK = "run_dir.txt"
EXPORT_JSON = "export.json"
SUBDIRS = ("checkpoints", "exports", "evals", "logs", "data")


def _drop(node: Any, path: list[str]) -> None:
    if not isinstance(node, dict) or not path:
        return
    head, rest = path[0], path[1:]
    for key in [k for k in node if fnmatch.fnmatchcase(str(k), head)]:
        if rest:
            _drop(node[key], rest)
        else:
            del node[key]


def hashed_config(cfg: DictConfig | Mapping[str, Any], ignore: Iterable[str] = HASH_IGNORE) -> dict[str, Any]:
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


def config_hash(cfg: DictConfig | Mapping[str, Any], ignore: Iterable[str] = HASH_IGNORE) -> str:
    """sha256 (hex) of the canonical JSON of :func:`hashed_config`."""
    blob = json.dumps(hashed_config(cfg, ignore), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def run_id(name: str, digest: str) -> str:
    return f"{name}-{digest[:12]}"


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What a run's callbacks are told about it when training builds them: its directory and identity.

    ``base_model`` is the resolved local path of ``model.name_or_path`` (what an export's adapter
    applies to); ``method`` names the LightningModule class."""

    dir: "RunDir"
    run_id: str = ""
    config_hash: str = ""
    seed: Optional[int] = None
    method: Optional[str] = None
    base_model: Optional[str] = None


class RunDirError(ConfigError):
    """A run directory that cannot take this launch (another config's run, ``run.resume`` refuses it);
    the user's to fix, so it is one line and exit 2."""


def changed_keys(before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two hashed configs (added and removed keys included)."""
    out = []
    for key in sorted(set(before) | set(after), key=str):
        a, b = before.get(key), after.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += changed_keys(a, b, f"{prefix}{key}.")
        elif a != b or (key in before) != (key in after):
            out.append(f"{prefix}{key}")
    return out


class RunDir:
    """Paths inside one run directory (creating nothing until :meth:`create`)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    checkpoints = property(lambda self: self.root / "checkpoints")
    exports = property(lambda self: self.root / "exports")
    evals = property(lambda self: self.root / "evals")
    logs = property(lambda self: self.root / "logs")
    data = property(lambda self: self.root / "data")
    report = property(lambda self: self.root / "report")
    config_yaml = property(lambda self: self.root / CONFIG_YAML)
    run_json = property(lambda self: self.root / RUN_JSON)
    metrics_json = property(lambda self: self.root / METRICS_JSON)
    lock_file = property(lambda self: self.root / RUN_LOCK)
    manifest = property(lambda self: self.data / "manifest.json")

    def export_dir(self, step: int) -> Path:
        return self.exports / step_dir_name(step)

    def eval_dir(self, step: int, benchmark: Optional[str] = None) -> Path:
        """Where the evaluation of ``step`` is written: ``evals/step_X``, or ``evals/<benchmark>/step_X``
        for a run that evaluates more than one benchmark per checkpoint."""
        return (self.evals / benchmark if benchmark else self.evals) / step_dir_name(step)

    def remove_leftovers(self) -> list[Path]:
        """Remove what writers killed mid-write left in the files only the launch holding ``run.lock``
        writes (the caller holds it, so those writers are gone): temp files of ``run.json``,
        ``config.yaml`` and the data manifest, and interrupted exports (``exports/.step_X-*``). Checkpoints
        (:func:`ifdistill.train.checkpointing.find_resume_checkpoint`), ``metrics.json``
        (:func:`ifdistill.results.run_metrics.remove_leftovers`) and evaluations
        (:func:`ifdistill.evaluator.results.remove_partials`) clean their own. Returns what was removed."""
        left = [p for f in (self.run_json, self.config_yaml, self.manifest) for p in atomic_leftovers(f)]
        left += sorted(self.exports.glob(f"{export_temp_prefix('*')}*")) if self.exports.is_dir() else []
        for path in left:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        return left

    def finished_exports(self) -> dict[int, Path]:
        """``{step: export dir}`` of the finished exports (``export.json`` is written last, inside a temp
        dir renamed into place, so a dir without it is an interrupted export)."""
        found = {}
        for export in sorted(self.exports.glob("step_*")):
            if (export / EXPORT_JSON).is_file():
                found[int(json.loads((export / EXPORT_JSON).read_text())["step"])] = export
        return found

    def is_run(self) -> bool:
        return self.run_json.is_file()

    def create(self) -> RunDir:
        for sub in SUBDIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        return self

    def read_meta(self) -> Optional[dict[str, Any]]:
        return json.loads(self.run_json.read_text()) if self.run_json.is_file() else None

    def write_launch(self, cfg: DictConfig | Mapping[str, Any], *, run_id: str, digest: str, ignore: Iterable[str],
                     resumed_from: Optional[str], **extra: Any) -> dict[str, Any]:
        """Write ``config.yaml`` and add this launch to ``run.json`` (atomically; rank 0 only); ``extra``
        fields go into the launch entry (``took_over_lock``: the holder of a stale lock)."""
        self.create()
        meta = self.read_meta() or {"run_id": run_id, "config_hash": digest, "hash_ignore": list(ignore),
                                    "hashed_config": hashed_config(cfg, ignore), "launches": []}
        self.check_config(cfg, digest, ignore, meta)
        meta["launches"].append({"time": now_iso(), "resumed_from": resumed_from, "pid": os.getpid(),
                                 "host": socket.gethostname(), **{k: v for k, v in extra.items() if v is not None}})
        write_text_atomic(self.config_yaml, OmegaConf.to_yaml(resolved_tree(cfg)))
        write_json_atomic(self.run_json, meta)
        return meta

    def check_config(self, cfg: DictConfig | Mapping[str, Any], digest: str, ignore: Iterable[str],
                     meta: Optional[dict[str, Any]] = None) -> None:
        """Raise :class:`RunDirError` when this directory holds the run of another config, naming the
        keys that changed (a run continues only with the config it started with)."""
        meta = meta if meta is not None else self.read_meta()
        if not meta or meta.get("config_hash") == digest:
            return
        changed = changed_keys(meta.get("hashed_config") or {}, hashed_config(cfg, ignore))
        raise RunDirError(f"{self.run_json}: this run has config_hash {meta.get('config_hash')}, the config given "
                          f"has {digest} (changed: {', '.join(changed[:8]) or 'the hashed keys'}); a run "
                          "resumes only with its own config: drop run.dir to start a new run")

    def mark_failed(self, reason: str) -> None:
        """Record that this process's launch stopped on an input error (``ifdistill-status``: failed);
        a launch of another process (a run this one was refused) is left as it is."""
        launches = (self.read_meta() or {}).get("launches") or [{}]
        if launches[-1].get("pid") == os.getpid() and launches[-1].get("host") == socket.gethostname():
            self._update_launch(failed=now_iso(), failure=reason)

    def mark_finished(self, final_step: int) -> None:
        """Record that the current launch reached the end of training (``ifdistill-status`` reads it)."""
        self._update_launch(finished=now_iso(), final_step=int(final_step))

    def mark_stopped(self, step: int, reason: str) -> None:
        """Record that the current launch stopped early for a requeue (checkpoint of ``step`` saved)."""
        self._update_launch(stopped=now_iso(), stopped_at_step=int(step), stop_reason=reason)

    def mark_diverged(self, record: dict[str, Any]) -> None:
        """Record that the current launch stopped on a non-finite value (:mod:`ifdistill.train.nonfinite`)."""
        self._update_launch(diverged=record)

    def record_launch(self, **fields: Any) -> None:
        """Add ``fields`` to the current launch's entry (e.g. its teacher pass's counts); no run here: nothing."""
        self._update_launch(**fields)

    def _update_launch(self, **fields: Any) -> None:
        meta = self.read_meta()
        if meta and meta.get("launches"):
            meta["launches"][-1].update(fields)
            write_json_atomic(self.run_json, meta)


STEP_RE = re.compile(r"step=(\d+)\.ckpt")


def checkpoint_step(path: str | os.PathLike) -> Optional[int]:
    """The step of a checkpoint named ``step=000200.ckpt``; ``None`` for anything else (temp files too)."""
    m = STEP_RE.fullmatch(Path(path).name)
    return int(m.group(1)) if m else None


def step_dir_name(step: int) -> str:
    return f"step_{int(step):06d}"


def export_temp_prefix(step: int | str) -> str:
    """The name prefix of an export's temp folder while it is written (``exports/.step_000200-<random>``);
    ``"*"``: a glob of every step's."""
    return f".{step_dir_name(step) if step != '*' else 'step_*'}-"


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def resolved_tree(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The config as plain data, resolved where it can be: a value that cannot resolve outside Hydra
    (``paths.output_dir: ${hydra:...}`` in tests that compose without a Hydra run) is kept as written, its
    neighbours resolved. A plain mapping is taken as resolved already. What a run hashes, records in
    ``config.yaml`` and hands to its loggers (:class:`ifdistill.train.schemas.TrainConfig` carries it)."""
    if not isinstance(cfg, DictConfig):
        return dict(cfg)
    return _resolved(cfg)


def _resolved(node: DictConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in node.keys():
        try:
            value = node[key]
            out[str(key)] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
        except Exception:  # omegaconf raises several interpolation errors
            child = node._get_node(key)
            out[str(key)] = _resolved(child) if isinstance(child, DictConfig) else \
                OmegaConf.to_container(node, resolve=False)[key]
    return out
