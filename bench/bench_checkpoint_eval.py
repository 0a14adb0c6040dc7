"""Training throughput with in-training evaluations running next to it, against none; export time.

Two runs of ``ifdistill-train experiment=demo`` (tiny model, CPU), the trainer pinned to core 0 with one
thread in both: (a) no evaluations, (b) the checkpoint-eval callback every ``--every`` steps, each
evaluation a vLLM-CPU process bound to core 1. Reported: median training tokens/s of each (from the
module's ``perf/tokens_per_s``, logged every 10 steps, so it includes the export pauses), their ratio,
and the export times (training is blocked only while exporting).

    python bench/bench_checkpoint_eval.py [--steps 60] [--every 20]
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


def run(out: Path, steps: int, every: int | None) -> dict:
    argv = ["taskset", "-c", "0", str(BIN / "ifdistill-train"), "experiment=demo", "logger=csv",
            f"paths.output_root={out}", f"trainer.max_steps={steps}", "run.eval_every_n_steps=1000",
            "run.validate_at_start=false", "trainer.log_every_n_steps=10"]
    if every:
        argv += ["callbacks=checkpoint_eval", "eval=synthetic", f"callbacks.checkpoint_eval.every_n_steps={every}",
                 "eval.data.max_examples=40", "eval.generation.max_new_tokens=64",
                 "+callbacks.checkpoint_eval.devices.cpu_threads_bind='1'"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - t0
    (run_dir,) = [p.parent for p in (out / "train" / "runs").glob("*/run.json")]
    (metrics_csv,) = list(run_dir.glob("logs/csv/*/metrics.csv"))
    tps = [float(r["perf/tokens_per_s"]) for r in csv.DictReader(open(metrics_csv)) if r.get("perf/tokens_per_s")]
    exports = [json.loads(p.read_text())["export_seconds"] for p in run_dir.glob("exports/*/export.json")]
    return {"wall_s": wall, "tokens_per_s": statistics.median(tps), "exports_s": exports}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = run(Path(tmp) / "none", args.steps, None)
        evals = run(Path(tmp) / "evals", args.steps, args.every)
    print(f"training tokens/s, no evaluations:            {base['tokens_per_s']:.0f}")
    print(f"training tokens/s, evaluations every {args.every} steps: {evals['tokens_per_s']:.0f}")
    print(f"ratio (with / without): {evals['tokens_per_s'] / base['tokens_per_s']:.2f}")
    ex = evals["exports_s"]
    print(f"export time per checkpoint: median {statistics.median(ex):.2f}s, max {max(ex):.2f}s over {len(ex)} exports")
    print(f"wall: {base['wall_s']:.0f}s without, {evals['wall_s']:.0f}s with (incl. waiting for the last evaluation)")


if __name__ == "__main__":
    main()
