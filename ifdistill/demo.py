"""``make demo``: the main job end to end on CPU, with the commands a researcher would type.

1. ``ifdistill-train experiment=demo callbacks=checkpoint_eval ...`` trains the tiny model (built
   locally) with SFT on the synthetic verifiable-instruction data; every ``--eval-every`` steps the
   checkpoint-eval callback exports the model and evaluates it with ``ifdistill-eval serve``, one
   long-lived vLLM-CPU evaluator process for the run (``--engine process``: a fresh one per checkpoint),
   on the synthetic eval split (training pinned to one core, vLLM to the other);
2. ``ifdistill-eval`` on the final export afterwards, with the run's own eval config (the post-training
   row: it must equal the in-training evaluation of the same step);
3. the run directory, the W&B offline run's path and PNG curves (``ifdistill-report``), then a table
   step -> IFEval prompt/instruction strict/loose and the line saying whether the in-training and the
   post-training evaluation share their ``eval_config_hash``: the last lines on the console.

The console shows ifdistill's lines only; the libraries' INFO output and warnings (training's, and the
post-training evaluator's vLLM engine) go to ``<run>/logs/console.log`` (``--verbose``: shown as well).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from ifdistill.console import LOG_FILE
from ifdistill.evaluator.launch import REQUEST_DIR, REQUEST_NAME
from ifdistill.evaluator.benchmark import of_results, short_name
from ifdistill.evaluator.output import read_results_json
from ifdistill.paths import REPO_ROOT
from ifdistill.results import run_metrics
from ifdistill.rundir import RunDir


def _run(argv: list[str], env: dict[str, str], what: str, log: Path | None = None) -> None:
    """Run one command as a user types it; ``log``: its output is appended there instead of the console."""
    print(f"$ {shlex.join(argv)}", flush=True)
    t0 = time.perf_counter()
    if log is None:
        subprocess.run(argv, env=env, check=True)
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            code = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
        if code:
            sys.exit(f"[demo] {what} failed (exit {code}); its output is in {log}")
    print(f"[demo] {what}: {time.perf_counter() - t0:.0f}s" + (f" (output in {log})" if log else ""), flush=True)


def _row(label: str, metrics: dict, columns: list[str]) -> str:
    return f"| {label} | " + " | ".join(f"{100 * metrics[m]:.1f}" if m in metrics else "-" for m in columns) + " |"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=150, help="optimizer steps")
    ap.add_argument("--eval-every", type=int, default=50, help="in-training evaluation cadence (steps)")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--engine", choices=("persistent", "process"), default="persistent",
                    help="in-training evaluator: one ifdistill-eval serve for the run, or a process per checkpoint")
    ap.add_argument("--out", default=str(REPO_ROOT / "outputs" / "demo"), help="output root")
    ap.add_argument("--verbose", action="store_true",
                    help="the libraries' INFO output and warnings on the console too (else in <run>/logs/console.log)")
    ap.add_argument("overrides", nargs="*", help="extra ifdistill-train overrides")
    args = ap.parse_args(argv)

    out = Path(args.out).absolute()
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1"}
    two_cores = (os.cpu_count() or 1) >= 2
    pin = ["taskset", "-c", "0"] if two_cores and Path("/usr/bin/taskset").exists() else []
    if pin:
        env["OMP_NUM_THREADS"] = "1"  # the trainer on core 0, the evaluator on core 1
    gen = f"eval.generation.max_new_tokens={args.max_new_tokens}"
    started = time.perf_counter()
    train_argv = pin + [str(bin_dir / "ifdistill-train"), "experiment=demo", "callbacks=checkpoint_eval",
                        "eval=synthetic", "logger=wandb", f"paths.output_root={out}",
                        f"trainer.max_steps={args.steps}", gen,
                        f"callbacks.checkpoint_eval.every_n_steps={args.eval_every}",
                        f"callbacks.checkpoint_eval.engine={args.engine}",
                        *(["+callbacks.checkpoint_eval.devices.cpu_threads_bind='1'"] if two_cores else []),
                        *(["run.verbose=true"] if args.verbose else []), *args.overrides]
    _run(train_argv, env, "training with in-training evaluations")

    runs = sorted((out / "train" / "runs").glob("demo-*"), key=lambda p: p.stat().st_mtime)
    run = RunDir(runs[-1])
    run_dir = run.root
    metrics = run_metrics.read(run_dir)
    steps = sorted(int(s) for s in metrics["checkpoints"])
    post_dir = run_dir / "post_training_eval"
    # The post-training evaluation: the same program and the run's own resolved eval config.
    request = run.eval_dir(steps[-1]) / REQUEST_DIR
    eval_argv = [str(bin_dir / "ifdistill-eval"), f"--config-dir={request}", f"eval={REQUEST_NAME}",
                 f"model={REQUEST_NAME}", f"export_dir={run.export_dir(steps[-1])}", f"output_dir={post_dir}",
                 f"hydra.run.dir={post_dir}", "overwrite=true"]
    _run(eval_argv, {k: v for k, v in env.items() if k != "OMP_NUM_THREADS"}, "post-training evaluation",
         log=None if args.verbose else run.logs / LOG_FILE)
    post = read_results_json(post_dir)

    from ifdistill.results.cli import write_report

    report = write_report([run_dir], run.report)
    wandb_runs = sorted(run.logs.rglob("offline-run-*"))
    print(f"run directory:   {run_dir}")
    print(f"W&B offline run: {wandb_runs[-1] if wandb_runs else '(none)'}  (wandb sync to upload)")
    plots = [f for f in report["files"] if str(f).endswith(".png")]
    print(f"plots:           {run.report} ({', '.join(f.name for f in plots)})")
    # the table and the identity line close the demo's output (one screen in all: tests/integration/train/test_demo.py)
    bench = of_results(post)  # the table's columns are the evaluated benchmark's headline metrics
    cols = bench.headline_metrics(post)
    print(f"\n{bench.display} on the synthetic eval split (%), in training and after it (demo total "
          f"{time.perf_counter() - started:.0f}s):")
    print("| step | " + " | ".join(short_name(c) for c in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for s in steps:
        print(_row(str(s), metrics["checkpoints"][str(s)]["metrics"], cols))
    print(_row(f"{steps[-1]} (ifdistill-eval, after training)", post["metrics"], cols))
    same = post.get("eval_config_hash") == metrics["checkpoints"][str(steps[-1])]["eval_config_hash"]
    print(f"eval_config_hash identical in training and after: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
