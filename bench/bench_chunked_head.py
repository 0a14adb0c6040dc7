"""Peak memory and time of the objective at Qwen3's vocabulary: the unchunked LM head vs the chunked one.

The objective of one micro-batch, from the supervised positions' hidden states to the gradients of
the hidden states and the LM-head weight: ``V = 151,936`` (Qwen3), hidden width 256 (the head's
matmul is not what is measured; the ``(N, V)`` softmax work and buffers are), N supervised tokens,
distillation's default (forward KL, ``kd_ratio`` 0.5, a teacher's hidden states through the same head).

Each measurement runs in a fresh process: peak memory is the growth of the process's resident-set
high-water mark (``ru_maxrss``) from after the inputs exist to after one forward + backward, so it is
what the objective adds above its inputs. Time is the median of ``--repeats`` further steps in the
same process. The unchunked path is measured only up to ``--max-unchunked`` tokens: at N = 4,096 it
would need ~17 GB on a 24 GB machine.

    python bench/bench_chunked_head.py                 # N = 1k, 2k, 4k, 8k; chunk sizes 512..4096 at 4k
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOCAB, HIDDEN = 151_936, 256


def worker(n: int, chunk: int | None, repeats: int) -> dict:
    import torch

    from ifdistill.train.chunked_head import chunked_head_objective
    from ifdistill.train.losses import ce_kd_with_stats

    torch.manual_seed(0)
    weight = (torch.randn(VOCAB, HIDDEN) * 0.05).requires_grad_(True)
    hidden = torch.randn(n, HIDDEN).requires_grad_(True)
    teacher = torch.randn(n, HIDDEN)
    targets = torch.randint(0, VOCAB, (n,))

    def loss_fn(s, y, t):
        return ce_kd_with_stats(s, y, t, kd_ratio=0.5)

    def step():
        weight.grad = hidden.grad = None
        if chunk is None:
            with torch.no_grad():
                t_logits = torch.nn.functional.linear(teacher, weight).float()
            loss, _ = loss_fn(torch.nn.functional.linear(hidden, weight).float(), targets, t_logits)
        else:
            loss, _ = chunked_head_objective(hidden, weight, None, targets, loss_fn, chunk_size=chunk,
                                             teacher_hidden=teacher)
        loss.backward()

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"n": n, "chunk": chunk, "peak_above_inputs_gb": (peak - base) * 1024 / 1e9,
            "step_s": statistics.median(times), "threads": torch.get_num_threads()}


def measure(n: int, chunk: int | None, repeats: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps([n, chunk, repeats])], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker")
    ap.add_argument("--tokens", default="1024,2048,4096,8192")
    ap.add_argument("--chunk", type=int, default=1024, help="chunk size of the N sweep")
    ap.add_argument("--chunks", default="512,1024,2048,4096", help="chunk sizes compared at N = 4096")
    ap.add_argument("--max-unchunked", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(*json.loads(args.worker))))
        return
    print(f"V = {VOCAB}, hidden {HIDDEN}, forward KL + CE (kd_ratio 0.5); peak = growth above the inputs")
    print("| N | unchunked peak GB | chunked peak GB | unchunked s | chunked s | time ratio |")
    print("|---|---|---|---|---|---|")
    for n in map(int, args.tokens.split(",")):
        c = measure(n, args.chunk, args.repeats)
        u = measure(n, None, args.repeats) if n <= args.max_unchunked else None
        cells = [f"{u['peak_above_inputs_gb']:.2f}" if u else "-", f"{c['peak_above_inputs_gb']:.2f}",
                 f"{u['step_s']:.3f}" if u else "-", f"{c['step_s']:.3f}",
                 f"{c['step_s'] / u['step_s']:.2f}x" if u else "-"]
        print(f"| {n} | " + " | ".join(cells) + " |", flush=True)
    print(f"\nchunk size at N = 4096 (chunk {args.chunk} above):")
    print("| chunk | peak GB | s |")
    print("|---|---|---|")
    for chunk in map(int, args.chunks.split(",")):
        c = measure(4096, chunk, args.repeats)
        print(f"| {chunk} | {c['peak_above_inputs_gb']:.2f} | {c['step_s']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
