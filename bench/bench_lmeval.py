"""lm-eval tasks: documents/s through ifdistill's engine (HF and vLLM backends) vs lm-eval's own ``hf`` model.

    .venv/bin/python bench/bench_lmeval.py [--mc-docs 200] [--gen-docs 40] [--backends hf vllm] [--threads 1]

Two local tasks running lm-eval's real definitions (tests/integration/lmeval/local_tasks.py): a
log-likelihood one (commonsense_qa: 5 choices per question) and a generative one (gsm8k, 2-shot,
24 new tokens), on tiny_qwen3 after a few training steps (the parity tests' model). Every row times
the same scope: lm-eval's ``evaluate`` on already-built tasks with an already-loaded model (requests,
model calls, filters and metrics) -- ifdistill's ``timings.evaluate_s``, and for lm-eval's ``hf`` model
the same ``evaluate`` call around an ``HFLM`` built beforehand. Model load and vLLM's engine start
are left out (the persistent evaluator pays them once per training run).

Each ratio is ifdistill's documents/s over lm-eval hf's in the same run. The machine may be shared:
compare rows of one run, not runs.

One run on the shared 2-core machine (defaults, one thread): commonsense_qa HF backend 8.15x (rows
that differ only in the one-token answer share a forward pass, and only the continuation positions'
logits are computed), vLLM backend 0.26x (vLLM's prompt log-probs cover every prompt position over the
151,936-token vocabulary); gsm8k HF backend 1.00x, vLLM backend 0.40x (vLLM-CPU's per-step overhead
dominates 24-token answers of a 2-layer model).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the local tasks and the model live in tests/

TASKS = {"loglikelihood": "commonsense_qa_local", "generative": "gsm8k_local"}


def run_ours(backend: str, task: str, tasks_dir: Path, model: Path, limit: int, threads: int, out: Path) -> float:
    from ifdistill.evaluator.cli import load_config
    from ifdistill.evaluator.run import evaluate

    config = load_config(["eval=lmeval", f"eval.backend={backend}", f"eval.lmeval.tasks=[{task}]",
                          f"eval.lmeval.include_path=[{tasks_dir}]", f"eval.lmeval.limit={limit}", "model=tiny_qwen3",
                          f"model.name_or_path={model}", "eval.runtime.progress=false", f"eval.runtime.num_threads={threads}",
                          "eval.runtime.kv_cache_memory_bytes=268435456", "overwrite=true"], output_dir=str(out))
    results = evaluate(config)
    return results["counts"]["num_documents"] / results["timings"]["evaluate_s"]


def run_lm_eval_hf(task: str, tasks_dir: Path, model: Path, limit: int, batch_size: int) -> float:
    import random

    import numpy as np
    import torch
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    lm = HFLM(pretrained=str(model), dtype="float32", device="cpu", batch_size=batch_size)
    loaded = TaskManager(include_path=[str(tasks_dir)]).load([task])
    random.seed(0)
    np.random.seed(1234)
    torch.manual_seed(1234)
    for t in loaded["tasks"].values():
        t.set_fewshot_seed(seed=1234)
    t0 = time.perf_counter()
    res = evaluate(lm=lm, task_dict=loaded, limit=limit, log_samples=True)
    seconds = time.perf_counter() - t0
    return res["n-samples"][task]["effective"] / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mc-docs", type=int, default=200)
    ap.add_argument("--gen-docs", type=int, default=40)
    ap.add_argument("--backends", nargs="+", default=["hf", "vllm"])
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the HF backend and of lm-eval hf")
    ap.add_argument("--batch-size", type=int, default=32, help="lm-eval hf batch size (= eval.runtime.hf_batch_size)")
    args = ap.parse_args()

    import torch

    from ifdistill.models.tiny_qwen3 import tiny_qwen3_path
    from tests.integration.lmeval.local_tasks import trained_model, write_tasks

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench_lmeval-"))
    tasks_dir = write_tasks(work, n_test=max(args.mc_docs, args.gen_docs))
    model = trained_model(tiny_qwen3_path())
    rows = []
    for kind, task in TASKS.items():
        limit = args.mc_docs if kind == "loglikelihood" else args.gen_docs
        peer = run_lm_eval_hf(task, tasks_dir, model, limit, args.batch_size)
        rows.append({"task": task, "kind": kind, "engine": "lm-eval hf", "docs_per_s": peer, "ratio": 1.0})
        for backend in args.backends:
            mine = run_ours(backend, task, tasks_dir, model, limit, args.threads, work / f"{backend}-{task}")
            rows.append({"task": task, "kind": kind, "engine": f"ifdistill {backend}", "docs_per_s": mine,
                         "ratio": mine / peer})
    print(f"{'task':24} {'kind':14} {'engine':16} {'docs/s':>9} {'vs lm-eval hf':>14}")
    for r in rows:
        print(f"{r['task']:24} {r['kind']:14} {r['engine']:16} {r['docs_per_s']:9.2f} {r['ratio']:13.2f}x")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
