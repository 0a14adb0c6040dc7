"""Host overhead of one training step, eager against compiled decoder layers: a CPU proxy of the GPU's launch bound.

On a GPU a small model's step is bound by the host: docs/gpu.md's H200 profile found the host busy 0.32-0.35 s
of a 0.37-0.42 s Qwen3-1.7B step at 4k tokens, issuing ~1,600 matmul, ~1,800 multiply and ~2,200 copy launches
per LoRA step. What the host does per step -- Python, the dispatcher, one ATen operator after another -- does
not depend on the width of the matrices, so a model of Qwen3-1.7B's *depth* and vocabulary at a width where
compute is negligible shows it on a CPU: 28 decoder layers of hidden 64 (Qwen3's q/k norms, grouped-query
attention, SwiGLU), the real 151,936-row tied head applied chunk by chunk (``logit_chunk_size`` of
conf/train.yaml), the real Qwen3 tokenizer on the synthetic set packed into one row, the production step
(``bench/gpu_steps.py``'s :func:`train_step`: ``training_step``, backward, the divergence guard's flags,
clipping, fused AdamW as on a GPU) in float32, as training runs on CPU (``--precision bf16-mixed`` runs it under
autocast as on a GPU, where the casts add operators to the eager step; a CPU without bfloat16 matrix units
spends seconds in the head's bfloat16 matmuls then).

Per variant (``eager``: ``kernels.compile=false``; ``compiled``: each decoder layer and the per-chunk objective
through ``torch.compile``, :mod:`ifdistill.train.kernels`), from one profiled step after warm-up:

- ``ops_per_step``: ATen operators dispatched (the profiler's ``aten::`` events, nested calls included: each is
  a dispatcher call the host makes); ``model_ops_per_step``: those of the forward and backward alone
  (:func:`forward_backward`: clipping and the optimizer loop over the parameters on CPU, ~13 operators each,
  where a GPU runs a few multi-tensor kernels). A compiled graph's generated kernels are not ATen operators; their calls
  are ``graph_calls_per_step`` (one per compiled graph call, forward and backward) -- the kernels inside one
  call are issued by generated code without the dispatcher;
- ``host_s_per_step``: the median wall time of a step (the host's: compute is negligible at this width, except
  the head's matmuls, which both variants run alike), ``tokens_per_s``;
- ``compile_s``: how much longer the first step took than the median (the one-time compilation).

The two variants are built from the same seed (the same weights) and run interleaved, step by step, on the same
batches. Goal (issue 56): compiled ``ops_per_step`` <= 1/3 of eager's (the printed ratio).

    python bench/bench_host_overhead.py [--json PATH] [--peft lora|full] [--tokens 1024] [--steps 6]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

from bench.gpu_steps import (FULL, LORA, SHAPES, build_model_dir, data_cfg, make_optimizer, model_cfg,  # noqa: E402
                              packed_rows, production_chunk_size, train_step)
from ifdistill.train.method import TrainingInputs  # noqa: E402

#: Qwen3-1.7B's depth, vocabulary and layer structure at a width where compute is negligible.
NARROW = dict(SHAPES["Qwen3-1.7B"], hidden_size=64, intermediate_size=192, num_attention_heads=2,
              num_key_value_heads=1, head_dim=32, max_position_embeddings=4096)
VARIANTS = {"eager": {"compile": False, "compile_loss": False}, "compiled": {"compile": True, "compile_loss": True}}
GOAL_OPS_RATIO = 1 / 3


def count_ops(names: Iterable[str]) -> dict[str, int]:
    """``ops`` (ATen operators: names starting ``aten::``) and ``graph_calls`` (compiled graphs called) among the
    profiler's event names of one step."""
    counts = Counter(names)
    aten = Counter({name: n for name, n in counts.items() if name.startswith("aten::")})
    return {"ops": sum(aten.values()), "top_ops": dict(aten.most_common(8)),
            "graph_calls": sum(n for name, n in counts.items() if name.startswith("## Call CompiledFxGraph"))}


def profiled_names(step) -> list[str]:
    """The names of every CPU event recorded while ``step()`` runs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return [e.name for e in prof.events()]


def summarise(times: list[float], tokens: int, names: list[str], warmup: int,
              model_names: Optional[list[str]] = None) -> dict[str, Any]:
    """One variant's row: operators and graph calls of the profiled step (``model_ops_per_step``: of its forward and
    backward alone, from ``model_names``), median host time, tokens/s, and the first step's excess over the median
    (``compile_s``)."""
    host = statistics.median(times[warmup:])
    counts = count_ops(names)
    model = count_ops(model_names) if model_names is not None else {"ops": None, "top_ops": None}
    return {"ops_per_step": counts["ops"], "model_ops_per_step": model["ops"],
            "graph_calls_per_step": counts["graph_calls"], "top_ops": counts["top_ops"],
            "model_top_ops": model["top_ops"], "host_s_per_step": host,
            "tokens_per_step": tokens, "tokens_per_s": tokens / host, "compile_s": max(0.0, times[0] - host),
            "steps": len(times) - warmup}


def ratios(result: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """compiled / eager of operators and host time per step, and compiled / eager tokens/s."""
    e, c = result["eager"], result["compiled"]
    out = {"ops": c["ops_per_step"] / e["ops_per_step"], "host_s": c["host_s_per_step"] / e["host_s_per_step"],
           "tokens_per_s": c["tokens_per_s"] / e["tokens_per_s"]}
    if e.get("model_ops_per_step"):
        out["model_ops"] = c["model_ops_per_step"] / e["model_ops_per_step"]
    return out


def forward_backward(module, batch: Mapping[str, Any], precision: str) -> None:
    """The step's forward (``training_step``: the layers, the chunked head and objective) and backward, without
    clipping and the optimizer -- what compilation changes. On CPU those two loop over the parameters (~13
    operators each: torch's multi-tensor kernels are CUDA's); on a GPU they are a few multi-tensor launches."""
    from bench.gpu_steps import autocast

    with autocast("cpu", precision):
        loss = module.training_step(batch, 0)
    loss.backward()


def unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def run(model_dir: Path, *, peft: Mapping[str, Any], tokens: int, steps: int, warmup: int,
        precision: str = "32-true", variants: Optional[Mapping[str, Mapping[str, Any]]] = None,
        threads: Optional[int] = 1) -> dict[str, Any]:
    """Every variant's row (:func:`summarise`) on packed rows of up to ``tokens`` tokens, interleaved."""
    import torch
    from transformers import AutoTokenizer

    from ifdistill.data.build import build_train_dataset
    from ifdistill.methods.sft.module import SFTModule

    if threads:
        torch.set_num_threads(threads)
    variants = dict(variants or VARIANTS)
    model = model_cfg(model_dir, "bfloat16" if precision == "bf16-mixed" else "float32")
    tok = AutoTokenizer.from_pretrained(model_dir)
    items = [it for it in build_train_dataset(data_cfg(model, n=max(64, 4 * tokens // 100)), tok).train.items
             if len(it["input_ids"]) <= tokens]
    batches = packed_rows(items, tokens, tok.pad_token_id, warmup + steps + 1)  # + 1: the profiled step
    modules, optims = {}, {}
    for name, kernels in variants.items():
        torch.manual_seed(0)
        # fused AdamW, as on a GPU (optim.fused: null fuses only on CUDA; on CPU it would loop over the parameters)
        inputs = TrainingInputs(model, peft, {"fused": True}, attn_implementation="sdpa",
                                logit_chunk_size=production_chunk_size(), kernels=kernels)
        modules[name] = SFTModule(inputs).train()
        optims[name] = make_optimizer(modules[name])
    times: dict[str, list[float]] = {name: [] for name in variants}
    graphs: dict[str, int] = dict.fromkeys(variants, 0)
    for i in range(warmup + steps):
        for name, module in modules.items():
            before = unique_graphs()
            t0 = time.perf_counter()
            float(train_step(module, batches[i], optims[name], "cpu", precision, i))
            times[name].append(time.perf_counter() - t0)
            graphs[name] += unique_graphs() - before
    out: dict[str, Any] = {}
    real = int((batches[-1]["seq_idx"] >= 0).sum())
    for name, module in modules.items():
        names = profiled_names(lambda: train_step(module, batches[-1], optims[name], "cpu", precision))
        model_names = profiled_names(lambda: forward_backward(module, batches[-1], precision))
        module.zero_grad(set_to_none=True)
        n = statistics.median(int((b["seq_idx"] >= 0).sum()) for b in batches[warmup:-1])
        out[name] = {**summarise(times[name], n, names, warmup, model_names), "graphs_compiled": graphs[name],
                     "profiled_tokens": real}
    return out


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    from ifdistill.paths import cache_dir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peft", choices=["lora", "full"], default="lora")
    ap.add_argument("--tokens", type=int, default=1024, help="packed row length (tokens per step)")
    ap.add_argument("--steps", type=int, default=6, help="timed steps per variant (after --warmup)")
    ap.add_argument("--warmup", type=int, default=2, help="steps before timing (the first one compiles)")
    ap.add_argument("--precision", choices=["32-true", "bf16-mixed"], default="32-true")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the host path is one thread)")
    ap.add_argument("--models-root", default=None, help="where the narrow model is built (default: cache)")
    ap.add_argument("--json", default=None, help='write {"eager": {...}, "compiled": {...}, ...} here')
    args = ap.parse_args(argv)
    root = Path(args.models_root) if args.models_root else cache_dir() / "bench-gpu-models"
    t0 = time.perf_counter()
    model_dir = build_model_dir("Qwen3-1.7B-depth-hidden64", NARROW, root)
    result = run(model_dir, peft=LORA if args.peft == "lora" else FULL, tokens=args.tokens, steps=args.steps,
                 warmup=args.warmup, precision=args.precision, threads=args.threads)
    result["ratios"] = ratios(result)
    result["settings"] = {**vars(args), "shape": NARROW, "logit_chunk_size": production_chunk_size(),
                          "seconds": round(time.perf_counter() - t0, 1)}
    for name in VARIANTS:
        r = result[name]
        print(f"{name:9s} ATen ops/step {r['ops_per_step']:6d} (forward+backward {r['model_ops_per_step']:6d})  "
              f"graph calls/step {r['graph_calls_per_step']:3d}  host s/step {r['host_s_per_step']:.4f}  "
              f"tokens/s {r['tokens_per_s']:8.0f}  compile s {r['compile_s']:.1f}  graphs {r['graphs_compiled']}")
    q = result["ratios"]
    print(f"ops ratio compiled/eager: {q['ops']:.3f} per step, {q['model_ops']:.3f} forward+backward (goal <= "
          f"{GOAL_OPS_RATIO:.3f}: {'met' if q['ops'] <= GOAL_OPS_RATIO else 'not met'} per step); host s/step "
          f"{q['host_s']:.2f}x; tokens/s {q['tokens_per_s']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
