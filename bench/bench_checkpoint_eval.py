"""In-training evaluation: a persistent evaluator (``ifdistill-eval serve``) vs a process per checkpoint.

Both measured in the same run, on the demo's setup (tiny model, CPU, trainer pinned to core 0 with one
thread, the vLLM-CPU evaluator bound to core 1):

1. training: ``ifdistill-train experiment=demo`` three times -- no evaluations, the checkpoint-eval
   callback with a process per checkpoint (``LocalRunner``), and with the persistent evaluator
   (``runner=PersistentRunner``). Reported: median training tokens/s (the module's
   ``perf/tokens_per_s``, logged every 10 steps, so it includes the export pauses), the run's wall
   time including the wait for the last evaluation (what ``make demo`` spends before its post-training
   step), and the ratios.
2. per-checkpoint evaluation wall time: the exports of the per-process run evaluated again through the
   checkpoint queue, one after the other, with each runner -- from submission to a complete
   results.json (engine start-up included: once for the server, every time for processes).

    python bench/bench_checkpoint_eval.py [--steps 150] [--every 50] [--max-new-tokens 160]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
PERSISTENT = "ifdistill.launchers.persistent_eval.PersistentRunner"


def train(out: Path, args, engine: str | None) -> dict:
    argv = ["taskset", "-c", "0", str(BIN / "ifdistill-train"), "experiment=demo", "logger=csv",
            f"paths.output_root={out}", f"trainer.max_steps={args.steps}", "trainer.log_every_n_steps=10"]
    if engine:
        argv += ["callbacks=checkpoint_eval", "eval=synthetic", f"callbacks.checkpoint_eval.every_n_steps={args.every}",
                 f"eval.generation.max_new_tokens={args.max_new_tokens}", "eval.runtime.progress=false",
                 "+callbacks.checkpoint_eval.devices.cpu_threads_bind='1'"]
    if engine == "persistent":
        argv.append(f"callbacks.checkpoint_eval.runner={{_target_: {PERSISTENT}}}")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"training ({engine or 'no evaluations'}) failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    (run_dir,) = [p.parent for p in (out / "train" / "runs").glob("*/run.json")]
    (metrics_csv,) = list(run_dir.glob("logs/csv/*/metrics.csv"))
    tps = [float(r["perf/tokens_per_s"]) for r in csv.DictReader(open(metrics_csv)) if r.get("perf/tokens_per_s")]
    engines = [json.loads(p.read_text()).get("runtime", {}).get("engine") for p in run_dir.glob("evals/*/results.json")]
    return {"wall_s": wall, "tokens_per_s": statistics.median(tps), "run_dir": run_dir, "engines": engines}


def eval_times(run_dir: Path, out: Path, runner) -> list[float]:
    """Seconds from submission to a complete result for each export of ``run_dir``, evaluated in turn."""
    from omegaconf import OmegaConf

    from ifdistill.callbacks.eval_jobs import EvalJob, EvalQueue
    from ifdistill.evaluator.launch import evaluator_command

    times = []
    queue = EvalQueue(runner=runner, retries=0, poll_interval_s=0.1)
    for export in sorted((run_dir / "exports").glob("step_*")):
        request = run_dir / "evals" / export.name / ".request"
        eval_cfg = OmegaConf.to_container(OmegaConf.load(request / "eval" / "_request.yaml"), resolve=True)
        model_cfg = OmegaConf.to_container(OmegaConf.load(request / "model" / "_request.yaml"), resolve=True)
        argv, env = evaluator_command(eval_cfg, export, out / export.name, model_cfg=model_cfg)
        t0 = time.perf_counter()
        events = queue.submit(EvalJob(int(export.name.split("_")[1]), export, out / export.name, argv, env))
        while queue.busy():
            time.sleep(0.1)
            events += queue.poll()
        times.append(time.perf_counter() - t0)
        if [e.kind for e in events] != ["ok"]:
            sys.exit(f"evaluation of {export} failed: {[(e.kind, e.reason, e.log_tail[-1500:]) for e in events]}")
    return times


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--max-new-tokens", type=int, default=160)
    args = ap.parse_args()
    from ifdistill.launchers.local_eval import LocalRunner
    from ifdistill.launchers.persistent_eval import PersistentRunner

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = train(root / "none", args, None)
        proc = train(root / "process", args, "process")
        pers = train(root / "persistent", args, "persistent")
        t_proc = eval_times(proc["run_dir"], root / "again-process", LocalRunner())
        runner = PersistentRunner()
        try:
            t_pers = eval_times(proc["run_dir"], root / "again-persistent", runner)
        finally:
            runner.close()
    print(f"engines recorded in results.json: per-process run {sorted(set(proc['engines']))}, "
          f"persistent run {sorted(set(pers['engines']))}")
    print(f"training tokens/s: no evaluations {base['tokens_per_s']:.0f}, per-process evaluations "
          f"{proc['tokens_per_s']:.0f}, persistent evaluator {pers['tokens_per_s']:.0f}")
    print(f"  ratio persistent / per-process: {pers['tokens_per_s'] / proc['tokens_per_s']:.2f}  "
          f"(per-process / none {proc['tokens_per_s'] / base['tokens_per_s']:.2f}, "
          f"persistent / none {pers['tokens_per_s'] / base['tokens_per_s']:.2f})")
    print(f"training wall incl. waiting for the last evaluation ({args.steps} steps, every {args.every}): "
          f"none {base['wall_s']:.0f}s, per-process {proc['wall_s']:.0f}s, persistent {pers['wall_s']:.0f}s; "
          f"ratio persistent / per-process {pers['wall_s'] / proc['wall_s']:.2f}")
    print("per-checkpoint evaluation wall (s): per-process " + ", ".join(f"{t:.1f}" for t in t_proc)
          + "; persistent " + ", ".join(f"{t:.1f}" for t in t_pers) + " (the first starts the server)")
    print(f"  mean per checkpoint: per-process {statistics.mean(t_proc):.1f}s, persistent "
          f"{statistics.mean(t_pers):.1f}s; ratio persistent / per-process "
          f"{statistics.mean(t_pers) / statistics.mean(t_proc):.2f} "
          f"(after the first: {statistics.mean(t_pers[1:] or t_pers) / statistics.mean(t_proc[1:] or t_proc):.2f})")


if __name__ == "__main__":
    main()
