"""From directories on disk to :class:`Run` objects: one per training run or stand-alone evaluation.

Accepted inputs (``ifdistill-report`` takes any mix):

- a **run directory**: holds ``metrics.json`` (see :mod:`ifdistill.results.run_metrics`) or, before
  its first evaluation, only training's ``run.json``; each evaluated checkpoint points at its evaluator
  output dir (``results_dir``, relative to the run directory or absolute), from which the per-prompt
  vectors for paired tests are read. A run without any evaluation stays a row (without numbers) and
  is named in a note, never left out silently;
- an **evaluator output directory**: holds ``results.json`` (a base model, or a checkpoint evaluated
  by hand); it becomes a run with a single checkpoint and no training metrics;
- a **sweep directory**: anything else; searched (up to :data:`MAX_DEPTH` levels) for the two above.
  A run directory is not searched further, so its own evaluator outputs are not listed twice.

Re-runs: training names a run directory by its ``config_hash`` (seed included), so two run
directories with one ``config_hash`` (the same command in two output roots) are one setup run twice,
not two seeds. :func:`load_all` keeps the latest (its last launch in ``run.json``, else its metrics.json
written last) and names the others in a note.

Final and best checkpoint: *final* is the highest evaluated step; *best* the one with the best
selection metric (by default the benchmark's headline, in its direction:
:class:`~ifdistill.benchmarks.base.Benchmark`). The best checkpoint is
chosen on the evaluation prompts themselves and is therefore optimistic -- the report always shows it
next to the final one, never instead of it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ifdistill.benchmarks import registry
from ifdistill.evaluator import output as eval_output
from ifdistill.results import run_config, run_metrics
from ifdistill.evaluator.output import EvalOutput
from ifdistill.runs.rundir import RUN_JSON, RunDir

MAX_DEPTH = 4
# Training-metric names, tried in order; ``*`` matches any part (fnmatch), so ``val/*/acc`` finds the
# SFT module's ``val/<held-out set>/acc`` (the first set in sorted order when there are several).
# Held-out values come before training-stream ones, which are noisier (one logging interval).
DEFAULT_TFA_KEYS = ("val/tfa", "val/*/tfa", "val/*/acc", "train/tfa", "train/acc")
DEFAULT_TFCE_KEYS = ("val/tfce", "val/*/tfce", "val/*/ce", "train/tfce", "train/ce")


@dataclasses.dataclass
class Checkpoint:
    """One evaluated checkpoint of ``benchmark`` (a registered name). ``output`` is loaded from
    ``results_dir`` when that exists."""

    step: int | None
    metrics: dict[str, Any]
    per_instruction_type: dict[str, Any]
    eval_config_hash: str | None
    results_dir: Path | None
    output: EvalOutput | None = None
    benchmark: str = dataclasses.field(default_factory=registry.default_name)

    def metric(self, name: str) -> float | None:
        value = self.metrics.get(name)
        return None if value is None else float(value)

    def headline_metrics(self) -> list[str]:
        """The metrics its benchmark reports for it, headline first."""
        return registry.get(self.benchmark).headline_metrics({"metrics": self.metrics})

    def samples(self) -> list | None:
        """What paired differences read: per-prompt decisions for a benchmark that has them
        (:attr:`~ifdistill.benchmarks.base.Benchmark.prompt_decisions`), else samples.jsonl's rows;
        None without samples."""
        if self.output is None:
            return None
        return self.output.samples if registry.get(self.benchmark).prompt_decisions else self.output.rows


@dataclasses.dataclass
class Run:
    name: str
    path: Path
    kind: str  # "run" (training run) or "eval" (a stand-alone evaluator output)
    method: str | None
    seed: int | None
    config_hash: str | None
    group_hash: str
    config: dict[str, Any]
    key_values: dict[str, Any]
    checkpoints: list[Checkpoint]
    train: dict[int, dict[str, Any]]
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    divergence: dict[str, Any] | None = None  # metrics.json's record when the run stopped diverged

    @property
    def final(self) -> Checkpoint | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def best(self, metric: str | None = None) -> Checkpoint | None:
        """The best ``metric`` (default: the headline) in its benchmark's direction; ties go to the earlier
        step (the cheaper model to keep)."""
        if self.final is None:
            return None
        metric = metric or self.final.headline_metrics()[0]
        sign = 1.0 if registry.get(self.final.benchmark).higher_is_better else -1.0
        scored = [c for c in self.checkpoints if c.metric(metric) is not None]
        return max(scored, key=lambda c: sign * c.metric(metric)) if scored else None  # max keeps the first

    def train_at(self, step: int | None, keys: Sequence[str]) -> tuple[float | None, int | None]:
        """The first of ``keys`` (patterns) found at ``step`` or the latest step before it.

        Returns ``(value, step it was logged at)``; ``(None, None)`` when none is found.
        """
        steps = sorted(s for s in self.train if step is None or s <= step)
        for s in reversed(steps):
            values = self.train[s]
            for pattern in keys:
                for name in sorted(fnmatch.filter(values, pattern)):
                    if values[name] is not None:
                        return float(values[name]), s
        return None, None


def method_of(config: Mapping[str, Any]) -> str | None:
    """``method.name``, else the method's folder in ``method._target_``
    (``ifdistill.methods.sft.module.SFTModule`` -> ``sft``), or for runs configured before methods had
    folders the module without ``_module`` (``ifdistill.train.sft_module.SFTModule`` -> ``sft``)."""
    section = config.get("method")
    if not isinstance(section, Mapping):
        return section if isinstance(section, str) else None
    if section.get("name"):
        return str(section["name"])
    target = str(section.get("_target_") or "")
    parts = target.split(".")
    if len(parts) >= 3 and parts[-2] == "module":
        return parts[-3]
    return parts[-2].removesuffix("_module") if len(parts) >= 2 else None


def discover(paths: Sequence[str | os.PathLike]) -> list[tuple[str, Path]]:
    """``[(kind, dir)]`` for the inputs, in argument order then path order, without duplicates."""
    found: list[tuple[str, Path]] = []
    seen: set[Path] = set()

    def visit(path: Path, depth: int) -> None:
        resolved = path.resolve()
        if resolved in seen:
            return
        if (path / run_metrics.FILENAME).is_file() or (path / RUN_JSON).is_file():
            seen.add(resolved)
            found.append(("run", path))
        elif eval_output.is_eval_dir(path):
            seen.add(resolved)
            found.append(("eval", path))
        elif depth < MAX_DEPTH:
            for child in sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")):
                visit(child, depth + 1)

    for p in paths:
        path = Path(p)
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: not a directory")
        visit(path, 0)
    return found


def results_dir_of(run_dir: str | os.PathLike, entry: Mapping[str, Any]) -> Path | None:
    """A metrics.json entry's evaluator output dir: its ``results_dir``, relative to the run directory
    (as the callback records it) or absolute; None when the entry names none."""
    results_dir = entry.get("results_dir")
    if not results_dir:
        return None
    path = Path(results_dir)
    return path if path.is_absolute() else Path(run_dir) / path


def _checkpoint(run_dir: Path, entry: Mapping[str, Any], section: str | None = None) -> Checkpoint:
    path = results_dir_of(run_dir, entry)
    output = eval_output.load(path) if path is not None and eval_output.is_eval_dir(path) else None
    metrics = dict(entry.get("metrics") or (output.metrics if output else {}))
    per_type = dict(entry.get("per_instruction_type") or (output.per_instruction_type if output else {}))
    bench = eval_output.benchmark_of(output.raw) if output else run_metrics.benchmark_of_entry(dict(entry), section)
    return Checkpoint(step=int(entry["step"]), metrics=metrics, per_instruction_type=per_type,
                      eval_config_hash=entry.get("eval_config_hash"), results_dir=path, output=output,
                      benchmark=bench)


def _run_meta(run_dir: Path) -> dict[str, Any]:
    path = run_dir / RUN_JSON
    return json.loads(path.read_text()) if path.is_file() else {}


def _recency(run: Run) -> float:
    """When a training run last ran: its last launch's start (run.json), else metrics.json's mtime."""
    launches = _run_meta(run.path).get("launches") or []
    if launches and launches[-1].get("time"):
        return dt.datetime.fromisoformat(str(launches[-1]["time"])).timestamp()
    metrics = run.path / run_metrics.FILENAME
    return metrics.stat().st_mtime if metrics.is_file() else 0.0


def load_training_run(run_dir: str | os.PathLike, benchmark: str | None = None) -> Run:
    """A training run with the checkpoints of its ``eval`` section, or of the extra benchmark
    ``benchmark`` (a name in ``callbacks.checkpoint_eval.evals``: ``metrics.json``'s ``evals/<name>``)."""
    run_dir = Path(run_dir)
    data = run_metrics.read(run_dir)
    meta = _run_meta(run_dir)
    config, file_hash, _ = run_config.read_config(run_dir)
    key_values = dict(data.get("config") or {})
    if not config:
        config = dict(key_values)
    seed = data.get("seed")
    if seed is None and isinstance(config.get("seed"), int):
        seed = config["seed"]
    method = method_of(config) or data.get("method")  # metrics.json holds the module's class name
    checkpoints = []
    failures = [f for f in data.get("failures") or [] if f.get("benchmark") == benchmark]
    for entry in run_metrics.results_of(data, benchmark).values():
        ckpt = _checkpoint(run_dir, entry, benchmark)
        required = registry.get(ckpt.benchmark).required_metrics or ckpt.headline_metrics()[:1]
        if required and all(m in ckpt.metrics for m in required):
            checkpoints.append(ckpt)
        else:  # listed, but neither metrics.json nor a results.json holds its numbers
            failures.append({"step": ckpt.step, "reason": f"no aggregates (results_dir {ckpt.results_dir})"})
    checkpoints.sort(key=lambda c: c.step)
    train = {int(s): dict(v) for s, v in (data.get("train") or {}).items()}
    return Run(
        name=data.get("run_id") or meta.get("run_id") or run_dir.name, path=run_dir, kind="run", method=method,
        seed=seed, config_hash=data.get("config_hash") or meta.get("config_hash") or file_hash,
        group_hash=run_config.grouping_hash(config) if config else (data.get("config_hash") or run_dir.name),
        config=config, key_values=key_values, checkpoints=checkpoints, train=train, failures=failures,
        divergence=dict(data.get("divergence") or {}) if data.get("state") == "diverged" else None,
    )


def load_eval_dir(path: str | os.PathLike, name: str | None = None, method: str | None = None) -> Run:
    """A stand-alone evaluation as a run with one checkpoint (its step, when results.json says)."""
    path = Path(path)
    out = eval_output.load(path)
    step = out.raw.get("step")
    if step is None:  # an export directory is named exports/step_XXXXXX
        found = re.search(r"step_(\d+)", str(out.model.get("export_dir") or ""))
        step = int(found.group(1)) if found else None
    # Same weights (adapter included) and same eval config: replicates of one evaluation.
    config = {"weights": out.model.get("weights_digest") or out.model.get("path"),
              "adapter": out.model.get("adapter_weights_sha256") or out.model.get("adapter_path"),
              "eval_config_hash": out.eval_config_hash}
    ckpt = Checkpoint(step=int(step) if step is not None else None, metrics=out.metrics,
                      per_instruction_type=out.per_instruction_type,
                      eval_config_hash=out.eval_config_hash, results_dir=path, output=out,
                      benchmark=eval_output.benchmark_of(out.raw))
    # No training seed and no training config_hash: the row is identified by its eval_config_hash.
    return Run(name=name or path.name, path=path, kind="eval", method=method or "eval", seed=None,
               config_hash=None, group_hash=run_config.grouping_hash(config),
               config=config, key_values={}, checkpoints=[ckpt], train={})


def latest_reruns(runs: Sequence[Run]) -> tuple[list[Run], list[str]]:
    """``(runs, notes)``: of the training runs sharing a ``config_hash`` only the latest (see the module
    docstring), in the place of the first; a note per dropped directory."""
    latest: dict[str, Run] = {}
    for r in runs:
        if r.kind == "run" and r.config_hash:
            kept = latest.get(r.config_hash)
            if kept is None or _recency(r) >= _recency(kept):
                latest[r.config_hash] = r
    kept_runs, notes, placed = [], [], set()
    for r in runs:
        if r.kind != "run" or not r.config_hash:
            kept_runs.append(r)
            continue
        winner = latest[r.config_hash]
        if r is not winner:
            notes.append(f"{r.path}: a re-run of config_hash {r.config_hash} (same config and seed); "
                         f"the latest, {winner.path}, is reported instead")
        if r.config_hash not in placed:
            placed.add(r.config_hash)
            kept_runs.append(winner)
    return kept_runs, notes


def load_all(paths: Sequence[str | os.PathLike], notes: list[str] | None = None,
             benchmark: str | None = None, reruns: list[Run] | None = None) -> list[Run]:
    """Every run found under ``paths`` (re-runs of one config as one run, :func:`latest_reruns`);
    names made unique (``name``, ``name#2``...) for the tables. ``notes`` receives a line for every
    directory left out and every run without an evaluation. ``benchmark``: training runs report that
    extra benchmark's checkpoints (:func:`load_training_run`); ``reruns`` receives the re-runs left out
    (the reproducibility check compares them with the run reported)."""
    found = [load_training_run(p, benchmark) if kind == "run" else load_eval_dir(p) for kind, p in discover(paths)]
    runs, dropped = latest_reruns(found)
    if reruns is not None:
        kept = {id(r) for r in runs}
        reruns += [r for r in found if id(r) not in kept]
    if notes is not None:
        notes += dropped
        notes += [f"{r.path}: run {r.name} has no evaluation yet (listed without numbers)"
                  for r in runs if not r.checkpoints]
        notes += [f"{r.path}: run {r.name} diverged at step {r.divergence.get('step')} "
                  f"({r.divergence.get('quantity')} not finite); its numbers are its last finite checkpoint's"
                  for r in runs if r.divergence is not None]
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.name] = counts.get(r.name, 0) + 1
        if counts[r.name] > 1:
            r.name = f"{r.name}#{counts[r.name]}"
    return runs


def base_dirs(base_model: str | Path | None) -> list[Path]:
    """The base model's evaluator output directories: ``base_model`` itself, or those under it (one
    per benchmark)."""
    if not base_model:
        return []
    if eval_output.is_eval_dir(base_model):
        return [Path(base_model)]
    dirs = [p for kind, p in discover([base_model]) if kind == "eval"]
    if not dirs:
        raise FileNotFoundError(f"{base_model}: --base-model holds no results.json (an evaluator output dir)")
    return dirs


def find_run(runs: Sequence[Run], name_or_dir: str) -> Run:
    """The run named ``name_or_dir``, or whose directory is that path."""
    for r in runs:
        if r.name == name_or_dir:
            return r
    target = Path(name_or_dir)
    if target.exists():
        for r in runs:
            if r.path.resolve() == target.resolve():
                return r
    raise KeyError(f"no run named or located at {name_or_dir!r}; have: {', '.join(r.name for r in runs)}")


@dataclasses.dataclass
class Evaluation:
    """One evaluation of one benchmark section of a run, for the cross-benchmark page.

    ``section``: ``"eval"`` (the run's eval section or a stand-alone evaluation) or the extra benchmark's
    name (``evals/<name>``); ``benchmark``: results.json's ``config.eval.benchmark`` (``ifeval``,
    ``ifbench``, ``lmeval``); ``metrics``: every aggregate and ``_stderr`` as a float
    (:func:`ifdistill.evaluator.output.metric_values`)."""

    section: str
    benchmark: str
    step: int | None
    metrics: dict[str, float]
    eval_config_hash: str | None
    results_dir: Path | None


def read_evaluation(section: str, step: int | None, entry: Mapping[str, Any], results_dir: Path | None) -> Evaluation:
    """From results_dir's results.json when it exists, else from the metrics.json ``entry``."""
    if results_dir is not None and eval_output.is_eval_dir(results_dir):
        raw = eval_output.read_results_json(results_dir)
        return Evaluation(section, eval_output.benchmark_of(raw), step, eval_output.metric_values(raw),
                          raw.get("eval_config_hash"), results_dir)
    metrics = dict(entry.get("metrics") or {})
    values = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return Evaluation(section, run_metrics.benchmark_of_entry(entry, section), step, values, entry.get("eval_config_hash"),
                      None)


def evaluations_of(run: Run) -> dict[str, list[Evaluation]]:
    """``{section: [evaluations by step]}`` of every benchmark a run has (a stand-alone evaluation: one
    section ``eval`` with one evaluation)."""
    if run.kind != "run":
        return {"eval": [read_evaluation("eval", run.final.step if run.final else None, {}, run.path)]}
    data = run_metrics.read(run.path)
    sections = {"eval": run_metrics.results_of(data)}
    sections.update({name: run_metrics.results_of(data, name) for name in sorted(data.get("evals") or {})})
    out: dict[str, list[Evaluation]] = {}
    for section, entries in sections.items():
        evals = []
        for entry in entries.values():
            evals.append(read_evaluation(section, int(entry["step"]), entry, results_dir_of(run.path, entry)))
        if evals:
            out[section] = sorted(evals, key=lambda e: e.step)
    return out


def data_manifest_digest(run: Run) -> str | None:
    """sha256 of the run's data manifest (``data/manifest.json``), or None without one."""
    path = RunDir(run.path).manifest
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
