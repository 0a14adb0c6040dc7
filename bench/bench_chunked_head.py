"""Peak memory and time of the objective at Qwen3's vocabulary: the unchunked LM head vs the chunked one.

The objective of one micro-batch, from the supervised positions' hidden states to the gradients of
the hidden states and the LM-head weight: ``V = 151,936`` (Qwen3), hidden width 256 (the head's
matmul is not what is measured; the ``(N, V)`` softmax work and buffers are), N supervised tokens,
distillation's default (forward KL, ``kd_ratio`` 0.5, a teacher's hidden states through the same head).

Peak memory: each (N, variant) runs one forward + backward in a fresh process; peak is the growth of
the process's resident-set high-water mark (``ru_maxrss``) from after the inputs exist to after the
step, so it is what the objective adds above its inputs. Time: one process per N runs every variant
interleaved step by step (same moment on a shared machine), ``--repeats`` rounds after one warm-up
step; a variant's time is its median, its ratio the median over rounds of (variant / unchunked)
measured in the same round. The unchunked path runs only where its estimated peak (5 fp32 copies of
``(N, V)``, 4.8 measured at N = 1,024) fits in 90 % of the machine's available memory; N = 8,192
(~25 GB) does not fit on a 24 GiB machine, and there the table has no unchunked column.
``--time-max`` leaves the (slow) step times out above an N, keeping the peaks.

    python bench/bench_chunked_head.py                    # N = 1k, 2k, 4k, 8k x chunk 128, 256, 512, 1024
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
UNCHUNKED_COPIES = 5  # fp32 (N, V) copies the unchunked objective holds at its peak (4.8 measured at N = 1,024)


def make_step(n: int):
    """``step(chunk)``: one forward + backward of the objective over N tokens (``chunk=None``: unchunked)."""
    import torch

    from ifdistill.train.chunked_head import Head, chunked_head_objective
    from ifdistill.train.losses import ce_kd_with_stats

    torch.manual_seed(0)
    weight = (torch.randn(VOCAB, HIDDEN) * 0.05).requires_grad_(True)
    hidden = torch.randn(n, HIDDEN).requires_grad_(True)
    teacher = torch.randn(n, HIDDEN)
    targets = torch.randint(0, VOCAB, (n,))

    def loss_fn(s, y, t):
        return ce_kd_with_stats(s, y, t, kd_ratio=0.5)

    def step(chunk: int | None) -> float:
        weight.grad = hidden.grad = None
        t0 = time.perf_counter()
        if chunk is None:
            with torch.no_grad():
                t_logits = torch.nn.functional.linear(teacher, weight).float()
            loss, _ = loss_fn(torch.nn.functional.linear(hidden, weight).float(), targets, t_logits)
        else:
            loss, _ = chunked_head_objective(hidden, Head(weight), targets, loss_fn, chunk_size=chunk,
                                             teacher_hidden=teacher)
        loss.backward()
        return time.perf_counter() - t0

    return step


def peak_worker(n: int, chunk: int | None) -> dict:
    step = make_step(n)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds = step(chunk)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_gb": (peak - base) * 1024 / 1e9, "first_step_s": seconds}


def time_worker(n: int, variants: list, repeats: int) -> dict:
    """Median step time per variant and median per-round ratio to the first variant, interleaved."""
    import torch

    step = make_step(n)
    step(variants[-1])  # warm-up: the libraries' one-time initialisation
    times: dict[str, list[float]] = {str(v): [] for v in variants}
    ratios: dict[str, list[float]] = {str(v): [] for v in variants}
    for _ in range(repeats):
        got = {str(v): step(v) for v in variants}
        for k, s in got.items():
            times[k].append(s)
            ratios[k].append(s / got[str(variants[0])])
    return {"threads": torch.get_num_threads(),
            **{k: {"s": statistics.median(times[k]), "ratio": statistics.median(ratios[k])} for k in times}}


def worker(kind: str, *args) -> None:
    print(json.dumps(peak_worker(*args) if kind == "peak" else time_worker(*args)))


def sub(*args) -> dict:
    out = subprocess.run([sys.executable, __file__, "--worker", json.dumps(args)], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise RuntimeError(f"worker {args} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker")
    ap.add_argument("--tokens", default="1024,2048,4096,8192")
    ap.add_argument("--chunks", default="128,256,512,1024")
    ap.add_argument("--repeats", type=int, default=1, help="timed rounds per N (after one warm-up step)")
    ap.add_argument("--time-max", type=int, default=8192, help="the largest N whose step times are measured")
    args = ap.parse_args()
    if args.worker:
        worker(*json.loads(args.worker))
        return
    chunks = [int(c) for c in args.chunks.split(",")]
    threads = None
    print(f"V = {VOCAB}, hidden {HIDDEN}, forward KL + CE (kd_ratio 0.5); peak = GB above the inputs (fresh "
          f"process per cell); time = median s per step, ratio = chunked / unchunked in the same round")
    print("| N | unchunked peak GB | unchunked s | " + " | ".join(f"chunk {c}: peak GB, s, ratio" for c in chunks) + " |")
    print("|---|---|---|" + "---|" * len(chunks))
    for n in map(int, args.tokens.split(",")):
        need = UNCHUNKED_COPIES * n * VOCAB * 4
        fits = need <= 0.9 * available_bytes()
        variants = ([None] if fits else []) + chunks
        timing = sub("time", n, variants, args.repeats) if n <= args.time_max else None
        threads = timing["threads"] if timing else threads
        u = sub("peak", n, None) if fits else None
        cells = [f"{u['peak_gb']:.2f}" if u else f"- (needs ~{need / 1e9:.0f} GB)",
                 f"{timing['None']['s']:.2f}" if u and timing else "-"]
        for c in chunks:
            p = sub("peak", n, c)
            t = timing[str(c)] if timing else None
            cells.append(f"{p['peak_gb']:.2f}, " + (f"{t['s']:.2f}, " if t else "-, ")
                         + (f"{t['ratio']:.2f}x" if t and u else "-"))
        print(f"| {n} | " + " | ".join(cells) + " |", flush=True)
    if threads:
        print(f"torch threads per process: {threads}")


if __name__ == "__main__":
    main()
