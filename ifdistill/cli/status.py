"""``ifdistill-status <sweep or run dir>...``: a sweep's runs with state, last step and latest evaluation.

A run directory is recognised by its ``run.json`` (written by ``train()`` at every launch). A Hydra job
directory (a sweep's ``<n>_<overrides>/``) holds ``run_dir.txt`` pointing at the run it trained, since run
directories are named by config hash, not by Hydra. State:

- ``finished``  the last launch recorded its end (``finished`` in ``run.json``);
- ``failed``    the last launch stopped on an error before or during training (``failure`` in
  ``run.json``: the cause, listed below the table);
- ``diverged``  the last launch stopped on a non-finite loss, gradient or weight (``diverged`` in
  ``run.json``: step and quantity; :mod:`ifdistill.train.nonfinite`);
- ``running``   the last launch's process is alive on this host;
- ``requeued``  the last launch saved its step on a requeue signal (time limit, preemption) and handed the
  job back (``stopped_at_step`` in ``run.json``); the next launch resumes there;
- ``stopped``   none of these: crashed, killed or on another node (re-run the same command, or let
  SLURM requeue it, to resume from the newest checkpoint).

Evaluation failures are *open* until a result of the same step is recorded after them (a retry, a
resumed run or ``ifdistill-eval backfill``), then *resolved*; the table counts both, and each open
failure is listed below it with its step, its attempt number across launches and its reason. An export
without a result that no failure explains (its trainer was killed while it was evaluated) is open too,
unless the run is running: nothing missing is ever hidden behind "open failures 0".
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from ifdistill.benchmarks import registry
from ifdistill.benchmarks.base import short_name
from ifdistill.results import run_metrics
from ifdistill.runs.rundir import RUN_DIR_LINK, SUBDIRS, RunDir, checkpoint_step

MAX_DEPTH = 5


def _walk(root: Path, depth: int = 0) -> Iterable[Path]:
    if RunDir(root).is_run():
        yield root
        return
    link = root / RUN_DIR_LINK
    if link.is_file():
        target = Path(link.read_text().strip())
        if RunDir(target).is_run():
            yield target
    if depth >= MAX_DEPTH:
        return
    for child in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if child.name in SUBDIRS:
            continue
        yield from _walk(child, depth + 1)


def find_runs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    seen, out = set(), []
    for p in paths:
        root = Path(p)
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such directory")
        for run in _walk(root):
            key = run.resolve()
            if key not in seen:
                seen.add(key)
                out.append(run)
    return out


def _alive(pid: int | None, host: str | None) -> bool:
    if not pid or (host and host != socket.gethostname()):
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def last_checkpoint_step(run: Path) -> int | None:
    steps = [checkpoint_step(p) for p in (run / "checkpoints").glob("*")] if (run / "checkpoints").is_dir() else []
    steps = [s for s in steps if s is not None]
    return max(steps) if steps else None


def run_status(run: Path) -> dict[str, Any]:
    meta = RunDir(run).read_meta() or {}
    launch = (meta.get("launches") or [{}])[-1]
    if launch.get("finished"):
        state = "finished"
    elif launch.get("failed"):  # stopped on an input error (run.json's launch names it)
        state = "failed"
    elif launch.get("diverged"):
        state = "diverged"
    elif _alive(launch.get("pid"), launch.get("host")):
        state = "running"
    elif launch.get("stopped_at_step") is not None:
        state = "requeued"
    else:
        state = "stopped"
    metrics = run_metrics.read(run)
    history = run_metrics.failure_history(metrics)
    step = launch.get("final_step") if state == "finished" else None
    return {
        "run_id": meta.get("run_id"), "dir": str(run), "state": state, "launches": len(meta.get("launches", [])),
        "last_step": step if step is not None else last_checkpoint_step(run),
        **_latest(run_metrics.results_of(metrics)),
        "benchmarks": {name: _latest(run_metrics.results_of(metrics, name), name) for name in metrics.get("evals") or {}},
        "failure": launch.get("failure") if state == "failed" else None,  # the cause run.json records
        "failures": [f for f in history if not f["resolved"]]
                    + ([] if state == "running" else unexplained(run, metrics)),
        "resolved_failures": sum(f["resolved"] for f in history),
    }


def unexplained(run: Path, metrics: dict) -> list[dict[str, Any]]:
    """An open failure for each finished export that lacks a result of an eval section the run evaluates
    (its own ``eval``, each of ``callbacks.checkpoint_eval.evals`` in its ``config.yaml`` and of
    ``metrics.json``'s ``evals``) and has no failure recorded since."""
    import yaml

    rd = RunDir(run)
    exports = rd.finished_exports()
    if not exports:
        return []
    config = yaml.safe_load(rd.config_yaml.read_text()) if rd.config_yaml.is_file() else {}
    configured = (((config or {}).get("callbacks") or {}).get("checkpoint_eval") or {}).get("evals") or {}
    sections = [None, *dict.fromkeys([*configured, *(metrics.get("evals") or {})])]
    history = run_metrics.failure_history(metrics)
    out = []
    for step in sorted(exports):
        for section in sections:
            if str(step) in run_metrics.results_of(metrics, section):
                continue
            if any(f["step"] == step and f.get("benchmark") == section and not f["resolved"] for f in history):
                continue  # the failure recorded says why
            out.append({"step": step, **({"benchmark": section} if section else {}), "attempt_no": None,
                        "resolved": False, "reason": "exported, not evaluated (re-run the same command or "
                                                     "`ifdistill-eval backfill`)"})
    return out


def _latest(results: dict, section: str | None = None) -> dict[str, Any]:
    """How many checkpoints of one benchmark are evaluated, and the latest one's step and metrics."""
    evals = sorted(((int(s), c) for s, c in results.items()), key=lambda t: t[0])
    step, entry = evals[-1] if evals else (None, {})
    return {"eval_step": step, "eval": entry.get("metrics", {}), "evaluated": len(evals),
            "benchmark": run_metrics.benchmark_of_entry(entry, section)}


def _pct(metrics: dict, key: str) -> str:
    v = metrics.get(key)
    return f"{100 * v:.1f}" if isinstance(v, (int, float)) else "-"


def _task_scores(metrics: dict) -> str:
    """Every metric of a benchmark whose metrics are not all fractions, each ``value±stderr``."""
    parts = []
    for key, value in metrics.items():
        if key.endswith("_stderr") or not isinstance(value, (int, float)):
            continue
        se = metrics.get(f"{key}_stderr")
        parts.append(f"{key} {value:.4f}" + (f"±{se:.4f}" if isinstance(se, (int, float)) else ""))
    return "; ".join(parts) or "-"


def _table(first: list[str], rows: list[tuple[list[Any], dict]]) -> list[str]:
    """Rows of evaluations: where every headline metric (:meth:`~ifdistill.benchmarks.base.Benchmark.
    headline_metrics`) is a fraction (:meth:`~ifdistill.benchmarks.base.Benchmark.is_fraction`), a
    percentage column per metric; else one column of every metric in its own unit."""
    benches = [registry.get(b["benchmark"]) for _, b in rows]
    columns: list[str] = []
    if all(bench.is_fraction(m) for bench, (_, b) in zip(benches, rows) for m in bench.headline_metrics({"metrics": b["eval"]})):
        for bench, (_, b) in zip(benches, rows):
            columns += [c for c in bench.headline_metrics({"metrics": b["eval"]}) if c not in columns]
        scores = [[_pct(b["eval"], c) for c in columns] for _, b in rows]
        names = [short_name(c) for c in columns]
    else:
        scores, names = [[_task_scores(b["eval"])] for _, b in rows], ["metrics"]
    head = "| " + " | ".join([*first, *names]) + " |"
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    lines += ["| " + " | ".join([*(str(c) for c in cells), *score]) + " |" for (cells, _), score in zip(rows, scores)]
    return lines


def format_table(rows: list[dict]) -> str:
    """One table of the runs (their ``eval`` section's latest scores), then one per benchmark evaluated next
    to it (``callbacks.checkpoint_eval.evals``), with that benchmark's scores (:func:`_table`)."""
    first = ["run", "state", "launches", "last step", "evals", "open failures", "resolved failures", "eval step"]
    lines = _table(first, [
        ([r["run_id"], r["state"], r["launches"], "-" if r["last_step"] is None else r["last_step"], r["evaluated"],
          len(r["failures"]), r["resolved_failures"], "-" if r["eval_step"] is None else r["eval_step"]], r)
        for r in rows])
    extra: dict[str, list[tuple[list[Any], dict]]] = {}
    for r in rows:
        for name, b in r["benchmarks"].items():
            at = b["eval_step"] if b["eval_step"] is not None else "-"
            extra.setdefault(b["benchmark"], []).append(([r["run_id"], name, b["evaluated"], at], b))
    for group in extra.values():
        lines += ["", *_table(["run", "benchmark", "evals", "eval step"], group)]
    failed = [r for r in rows if r.get("failure")]
    if failed:
        lines += ["", "failed launches (fix the cause, then re-run the same command):"]
        lines += [f"- {r['run_id']}: {r['failure']}" for r in failed]
    open_failures = [(r["run_id"], f) for r in rows for f in r["failures"]]
    if open_failures:
        lines += ["", "open evaluation failures (`ifdistill-eval backfill run_dir=...` retries them):"]
        for run_id, f in open_failures:
            attempt = f"attempt {f['attempt_no']}" if f["attempt_no"] else "no evaluator run"
            where = f" [{f['benchmark']}]" if f.get("benchmark") else ""
            lines.append(f"- {run_id} step {f.get('step')}{where} ({attempt}): {f.get('reason', '')}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ifdistill-status", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", help="run directories, sweep directories or output roots")
    ap.add_argument("--json", action="store_true", help="one JSON object per run instead of a table")
    args = ap.parse_args(argv)
    try:
        runs = find_runs(args.paths)
        rows = [run_status(r) for r in runs]
    except (FileNotFoundError, run_metrics.MetricsFileError) as err:
        print(f"ifdistill-status: {err}", file=sys.stderr)
        return 2
    if args.json:
        for r in rows:
            print(json.dumps(r, sort_keys=True))
    elif rows:
        print(format_table(rows))
    else:
        print(f"no runs (run.json) under {', '.join(args.paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
