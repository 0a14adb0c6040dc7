"""GPU benchmark: SFT throughput and MFU, distillation / SFT step ratio, HF generation time, peak memory.

Run by ``scripts/gpu_check.py`` (one table, one JSON); alone: ``python bench/bench_gpu.py [--cpu-smoke]``.
One code path for every device: the device and the shapes are parameters, so ``--cpu-smoke`` (tiny shapes,
a few steps, ``device="cpu"``) runs exactly the functions the GPU run uses, and CI keeps them working.

Models: random-init, built locally with the *shapes* of the real models (no download), the Qwen3 tokenizer
and chat template of the shared data folder (both real models have 151,936 embedding rows):

- ``Qwen/Qwen3-1.7B``, ``Qwen/Qwen2.5-0.5B``: values copied from each model's public ``config.json``
  (huggingface.co/Qwen/Qwen3-1.7B/blob/main/config.json, huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json);
- ``--cpu-smoke``: the same two architectures (Qwen3, Qwen2) at hidden 64, 2 layers, in float32 (``32-true``): a
  CPU without bfloat16 matrix units spends seconds per step in the 151,936-row head's bfloat16 matmuls, and the
  smoke checks the report, not bfloat16's numerics (``tests/gpu`` does that on a GPU).

What one step is: the production step of ``ifdistill-train`` on one GPU -- ``module.training_step``
(the method's real loss through the chunked LM head, ``logit_chunk_size`` of ``conf/train.yaml``,
completion tokens only, token sums), backward, the divergence guard's device-side flags handed to the
optimizer as ``found_inf``, gradient clipping at 1.0 and the optimizer the module configures (fused AdamW
on CUDA) -- under ``torch.autocast(device, bfloat16)``, i.e. Lightning's ``bf16-mixed``, with the frozen
weights in ``model.dtype`` of ``conf/model/qwen3_1.7b.yaml`` (bfloat16; full fine-tuning loads float32
master weights, :mod:`ifdistill.train.modeling`). SFT rows are *packed* (rows of up to ``seq`` tokens,
position ids restarting per example, the boundaries passed to the attention kernel of
``model.attn_implementation: auto``; ``packed_sdpa`` in the CPU smoke so that its path runs there), at
two sizes per step (``seqs``: 4,096 and 16,384 tokens on GPU; a row that runs out of GPU memory is
retried with gradient checkpointing and says so).

How the step runs: ``kernels`` of ``conf/train.yaml`` at its defaults (``auto``: compiled decoder layers and
objective on CUDA, Liger's kernels where liger-kernel imports; :mod:`ifdistill.train.kernels`); each row's
``kernels`` says what ran. ``--levers`` adds, at the first row length, each lever alone (``_eager``: neither
compile nor Liger, the step before them; ``_compiled``; ``_liger``), measured before any row with Liger
(Liger patches transformers' classes for the rest of the process).

The peer in the same run: TRL's ``SFTTrainer`` (:func:`bench.trl_peer.measure_trl_sft`, the ``bench`` extra) on
the same model files, examples, rows, attention kernel and precision, its padding-free collator and Liger where
installed; ``ifdistill/TRL tokens/s`` per kind and row length. Issue 56's goal: >= 1.2x on every row.

MFU = model FLOPs per second / peak dense bf16 FLOP/s of the device. Model FLOPs of one step (PaLM,
Chowdhery et al. 2022, appendix B, with the causal attention halved):

    c * N_body * T  +  c * V * H * S  +  6 * N_lora * T  +  6 * L * (n_heads * head_dim) * sum_docs(len^2)

with T tokens in the row, S supervised positions (the LM head runs only there), N_body the decoder's
parameters (embedding and head excluded), V*H the head; c = 6 for full fine-tuning (forward 2, input
gradients 2, weight gradients 2) and c = 4 for LoRA (frozen weights get no weight gradient). The last
term is causal attention (QK^T and AV, forward 2*d*len^2 per layer, backward twice that) within each
packed example. Recomputation (gradient checkpointing) is not counted, as usual for MFU. Every SFT row
reports both conventions: ``mfu_6n`` (c = 6, the usual "6N" count, which credits a LoRA step with the
weight gradients it does not compute) and ``mfu_4n`` (c = 4: what a LoRA step computes); ``mfu`` is the
one that matches the row (6N for full fine-tuning, 4N for LoRA).

Where the time goes: one extra step of each SFT row runs under ``torch.profiler`` and the row reports
the host's busy time (the sum of the CPU operators' self times: Python, dispatch, kernel launches), the
device's busy time (the sum of the kernels' times) and the step's wall time; a device busy for much less
than the wall time means the step is bound by the host (launches, synchronisations), not by the GPU.

Peak dense bf16 tensor-core FLOP/s (NVIDIA data sheets, without sparsity): H100 SXM and H200 989.4 T,
H100 NVL 835 T, H100 PCIe 756 T, A100 312 T; picked from ``torch.cuda.get_device_name()``; an unknown
GPU and the CPU give MFU ``null``.

Timing: steps of the variants being compared run interleaved (SFT step, distillation step, ...) on the
same batches; the median step is reported and ratios are taken between variants of the same run. On a
GPU every timing is bracketed by ``torch.cuda.synchronize``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

# after the path is set:
from bench.gpu_steps import (FULL, LORA, SHAPES, SMOKE_SHAPES, batches_from, build_model_dir,  # noqa: E402
                             data_cfg, kernels_used, make_optimizer, model_cfg, packed_rows, peak_bf16_flops,
                             peak_gib, place, production_chunk_size, reset_peak, sft_items, time_interleaved,
                             train_step)
from bench.step_costs import profile_step, step_flops  # noqa: E402
from bench.trl_peer import measure_trl_sft, trl_available  # noqa: E402
from ifdistill.methods.distill.settings import DistillSettings  # noqa: E402
from ifdistill.train.method import TrainingInputs  # noqa: E402


# -- measurements --------------------------------------------------------------------------------------
def _is_oom(err: BaseException) -> bool:
    import torch

    return isinstance(err, torch.cuda.OutOfMemoryError) or "out of memory" in str(err).lower()


def measure_sft(model_dir: Path, device: str, *, peft: Mapping[str, Any], dtype: str, precision: str, seq: int,
                warmup: int, steps: int, peak_flops: Optional[float], gradient_checkpointing: bool = False,
                attn_implementation: Optional[str] = None, kernels: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """SFT on packed rows of ``seq`` tokens: tokens/s, MFU (6N and 4N), the profiled split, peak memory.
    Out of GPU memory without gradient checkpointing: measured again with it (``gradient_checkpointing``)."""
    import torch

    try:
        return _measure_sft(model_dir, device, peft=peft, dtype=dtype, precision=precision, seq=seq, warmup=warmup,
                            steps=steps, peak_flops=peak_flops, gradient_checkpointing=gradient_checkpointing,
                            attn_implementation=attn_implementation, kernels=kernels)
    except RuntimeError as err:
        if gradient_checkpointing or not _is_oom(err):
            raise
    torch.cuda.empty_cache()
    return _measure_sft(model_dir, device, peft=peft, dtype=dtype, precision=precision, seq=seq, warmup=warmup,
                        steps=steps, peak_flops=peak_flops, gradient_checkpointing=True,
                        attn_implementation=attn_implementation, kernels=kernels)


def _measure_sft(model_dir: Path, device: str, *, peft: Mapping[str, Any], dtype: str, precision: str, seq: int,
                 warmup: int, steps: int, peak_flops: Optional[float], gradient_checkpointing: bool,
                 attn_implementation: Optional[str], kernels: Optional[Mapping[str, Any]]) -> dict[str, Any]:
    import torch

    from ifdistill.train.modeling import base_causal_lm
    from ifdistill.methods.sft.module import SFTModule

    model = model_cfg(model_dir, dtype)
    batches = packed_rows(*sft_items(model_dir, model, seq), warmup + steps + 1)  # + 1: the profiled step
    reset_peak(device)
    torch.manual_seed(0)
    inputs = TrainingInputs(model, peft, gradient_checkpointing=gradient_checkpointing,
                            attn_implementation=attn_implementation, logit_chunk_size=production_chunk_size(),
                            kernels=kernels)
    module = place(SFTModule(inputs), device).train()
    variants = {"sft": (module, batches)}
    timing = time_interleaved(variants, device, precision, warmup, steps)["sft"]
    optimizer = make_optimizer(module)
    prof = profile_step(lambda: train_step(module, batches[-1], optimizer, device, precision), device)
    tokens = statistics.median(int((b["seq_idx"] >= 0).sum()) for b in batches[warmup:-1])
    flops = {c: statistics.median(step_flops(module, b, c=c) for b in batches[warmup:-1]) for c in (6, 4)}
    mfu = {c: flops[c] / timing["step_s"] / peak_flops if peak_flops else None for c in flops}
    own = 6 if peft["method"] == "none" else 4
    out = {"tokens_per_step": tokens, "step_s": timing["step_s"], "tokens_per_s": tokens / timing["step_s"],
           "model_flops_per_step": flops[own], "model_flops_6n": flops[6], "model_flops_4n": flops[4],
           "mfu": mfu[own], "mfu_6n": mfu[6], "mfu_4n": mfu[4], "profile": prof,
           "attn_implementation": base_causal_lm(module.model).config._attn_implementation,
           "logit_chunk_size": module.logit_chunk_size, "gradient_checkpointing": gradient_checkpointing,
           "kernels": kernels_used(module),
           "peak_mem_gib": peak_gib(device), "loss_first": timing["loss_first"], "loss_last": timing["loss_last"],
           "steps": steps, "params": sum(p.numel() for p in module.parameters()),
           "trainable_params": sum(p.numel() for p in module.parameters() if p.requires_grad)}
    del module
    return out


def measure_distill_ratio(model_dir: Path, device: str, *, dtype: str, precision: str, micro_batch: int, k: int,
                          warmup: int, steps: int) -> dict[str, Any]:
    """LoRA SFT step and ICL-distillation step (k shared demonstrations, frozen-initial teacher = the adapter
    disabled) on the same student examples, interleaved; padded batches (distillation does not pack)."""
    import torch

    from ifdistill.train.datamodule import TrainDataModule
    from ifdistill.methods.distill.module import ICLDistillModule
    from ifdistill.methods.sft.module import SFTModule

    model = model_cfg(model_dir, dtype)
    n = micro_batch * (warmup + steps) + 2 * k  # the demonstrations come from the examples outside the batch
    sft_b = batches_from(TrainDataModule(data_cfg(model, n), model, micro_batch_size=micro_batch), warmup + steps)
    dist_b = batches_from(TrainDataModule(data_cfg(model, n, k), model, method=ICLDistillModule,
                                          micro_batch_size=micro_batch), warmup + steps)
    reset_peak(device)
    torch.manual_seed(0)
    chunk = production_chunk_size()
    sft = place(SFTModule(TrainingInputs(model, LORA, logit_chunk_size=chunk)), device).train()
    torch.manual_seed(0)
    dist = place(ICLDistillModule(TrainingInputs(model, LORA, logit_chunk_size=chunk),
                                  DistillSettings(kd_ratio=0.5, teacher="frozen_initial")),
                 device).train()
    t = time_interleaved({"sft": (sft, sft_b), "distill": (dist, dist_b)}, device, precision, warmup, steps)
    del sft, dist
    return {"sft_step_s": t["sft"]["step_s"], "distill_step_s": t["distill"]["step_s"],
            "ratio": t["distill"]["step_s"] / t["sft"]["step_s"], "micro_batch": micro_batch, "k": k,
            "peak_mem_gib": peak_gib(device), "steps": steps,
            "student_tokens_per_step": statistics.median(int(b["attention_mask"].sum()) for b in sft_b[warmup:])}


def measure_generation(model_dir: Path, device: str, *, dtype: str, prompts: Optional[int], max_new_tokens: int,
                       batch_size: int) -> dict[str, Any]:
    """``ifdistill-eval``'s HF backend on the shared IFEval prompts (541; ``prompts``: the first N)."""
    from ifdistill.evaluator.cli import load_config
    from ifdistill.evaluator.run import evaluate

    reset_peak(device)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-eval-") as out:
        config = load_config(["model=tiny_qwen3", f"model.name_or_path={model_dir}", "eval=ifeval_local",
                              "eval.backend=hf", f"eval.dtype={dtype}", f"eval.runtime.hf_device={device}",
                              f"eval.runtime.hf_batch_size={batch_size}", "eval.runtime.progress=false",
                              f"eval.generation.max_new_tokens={max_new_tokens}",
                              f"eval.data.max_examples={prompts if prompts else 'null'}"], output_dir=out + "/o")
        results = evaluate(config)
    return {"prompts": results["counts"]["num_prompts"], "generate_s": results["timings"]["generate_s"],
            "generated_tokens": results["counts"]["generated_tokens"],
            "tokens_per_s": results["timings"]["generated_tokens_per_s"], "max_new_tokens": max_new_tokens,
            "batch_size": batch_size, "peak_mem_gib": peak_gib(device)}


# -- the whole benchmark -------------------------------------------------------------------------------
GPU_SETTINGS = {"seqs": [4096, 16384], "warmup": 2, "steps": 8, "distill_micro_batch": 8, "k": 4, "prompts": None,
                "max_new_tokens": 256, "gen_batch_size": 64, "dtype": "bfloat16", "precision": "bf16-mixed",
                "attn_implementation": "auto", "levers": False, "lever_kinds": ["lora", "full"], "trl": True,
                "trl_seqs": None, "compile_backend": "inductor"}
# one torch thread: at these sizes a step is per-op overhead, and on a shared CPU more threads contend; the levers'
# compiled rows through aot_eager (the traced graphs without code generation: seconds, not minutes, on 2 cores);
# levers for LoRA and TRL at the first row length only (each row is seconds of CI)
SMOKE_SETTINGS = {"seqs": [256, 512], "warmup": 1, "steps": 1, "distill_micro_batch": 2, "k": 4, "prompts": 4,
                  "max_new_tokens": 8, "gen_batch_size": 4, "dtype": "float32", "precision": "32-true", "threads": 1,
                  "attn_implementation": "packed_sdpa", "levers": True, "lever_kinds": ["lora"], "trl": True,
                  "trl_seqs": 1, "compile_backend": "aot_eager"}
#: The levers of ``kernels`` one at a time (``--levers``, at the first row length): each against the others and
#: the default rows (``auto``: everything that applies on the device). Liger patches transformers' classes for
#: the rest of the process, so the rows without it run first.
LEVERS = {"eager": {"compile": False, "compile_loss": False, "liger": False},
          "compiled": {"compile": True, "compile_loss": True, "liger": False},
          "liger": {"compile": False, "compile_loss": False, "liger": True}}


def sft_label(kind: str, seq: int) -> str:
    """``sft_lora_packed_4k``: the measurement name of an SFT row (``kind`` lora or full, ``seq`` tokens)."""
    return f"sft_{kind}_packed_{seq // 1024}k" if seq % 1024 == 0 else f"sft_{kind}_packed_{seq}"


def run_benchmark(*, smoke: bool, device: str, models_root: Path, only: Iterable[str] = (), generation: bool = True,
                  json_path: Optional[Path] = None, distill: bool = True,
                  overrides: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """Every measurement for every shape; returns ``{"settings", "device", "rows", "ratios"}``. ``overrides``
    replace entries of the settings (``seqs``, ``levers``, ``trl``).

    With ``json_path`` the result so far is written there after every row (``"complete": false`` until the
    last), so a run stopped at a time limit still leaves what it measured."""
    import torch

    shapes = SMOKE_SHAPES if smoke else SHAPES
    settings = {**(SMOKE_SETTINGS if smoke else GPU_SETTINGS), **(overrides or {})}
    if settings.get("threads"):
        torch.set_num_threads(settings["threads"])
    name = torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else "cpu"
    peak = peak_bf16_flops(name) if name != "cpu" else None
    rows: list[dict[str, Any]] = []
    ratios: dict[str, float] = {}
    out = {"settings": {**settings, "generation": generation}, "device": {"name": name, "peak_bf16_flops": peak},
           "rows": rows, "ratios": ratios, "complete": False}

    def save() -> None:
        if json_path is not None:
            Path(json_path).write_text(json.dumps(out, indent=2) + "\n")

    import torch._dynamo

    from ifdistill.train import kernels

    # several models and variants in one process: more graphs of the decoder layer's code than one training run makes
    torch._dynamo.config.recompile_limit = max(64, torch._dynamo.config.recompile_limit)
    trl = trl_available() if settings["trl"] else None
    out["trl"] = trl or "not installed (pip install 'ifdistill[bench]'): no TRL rows"
    cuda = torch.device(device).type == "cuda"
    levers = {k: v for k, v in LEVERS.items() if k != "liger" or (cuda and kernels.liger_installed())}
    backend = {"compile_backend": settings["compile_backend"]}

    def sft_row(model_name: str, label: str, measure, **kwargs) -> dict[str, Any]:
        r = measure(**kwargs)
        rows.append({"model": model_name, "measurement": label, **r})
        print(f"[bench] {model_name} {label}: {r['tokens_per_s']:.0f} tok/s", flush=True)
        save()
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
        return r

    for model_name, shape in shapes.items():
        if only and model_name not in only:
            continue
        t0 = time.perf_counter()
        model_dir = build_model_dir(model_name, shape, models_root)
        print(f"[bench] {model_name}: model at {model_dir} ({time.perf_counter() - t0:.0f} s)", flush=True)
        common = dict(model_dir=model_dir, device=device, dtype=settings["dtype"], precision=settings["precision"],
                      warmup=settings["warmup"], steps=settings["steps"], peak_flops=peak,
                      attn_implementation=settings["attn_implementation"])
        if settings["levers"]:
            seq = settings["seqs"][0]
            for kind, peft in (("lora", LORA), ("full", FULL)):
                if kind not in settings["lever_kinds"]:
                    continue
                for lever, ks in levers.items():
                    sft_row(model_name, f"{sft_label(kind, seq)}_{lever}", measure_sft, peft=peft, seq=seq,
                            kernels={**ks, **backend}, **common)
        for i, seq in enumerate(settings["seqs"]):
            ours = {kind: sft_row(model_name, sft_label(kind, seq), measure_sft, peft=peft, seq=seq,
                                  kernels=backend, **common) for kind, peft in (("lora", LORA), ("full", FULL))}
            ratios[f"{model_name} lora/full tokens/s at {seq}"] = ours["lora"]["tokens_per_s"] / ours["full"]["tokens_per_s"]
            if trl is None or (settings["trl_seqs"] is not None and i >= settings["trl_seqs"]):
                continue
            for kind, peft in (("lora", LORA), ("full", FULL)):
                theirs = sft_row(model_name, f"trl_{sft_label(kind, seq)}", measure_trl_sft, peft=peft, seq=seq, **common)
                ratios[f"{model_name} ifdistill/TRL tokens/s, {kind} at {seq}"] = (
                    ours[kind]["tokens_per_s"] / theirs["tokens_per_s"])
        if distill:
            d = measure_distill_ratio(model_dir, device, dtype=settings["dtype"], precision=settings["precision"],
                                      micro_batch=settings["distill_micro_batch"], k=settings["k"],
                                      warmup=settings["warmup"], steps=settings["steps"])
            rows.append({"model": model_name, "measurement": f"distill_k{settings['k']}_shared_vs_sft_lora_padded", **d})
            ratios[f"{model_name} distill_k{settings['k']}_shared/sft step"] = d["ratio"]
            print(f"[bench] {model_name} distillation/SFT step: {d['ratio']:.2f}x", flush=True)
            save()
        if not generation:
            continue
        g = measure_generation(model_dir, device, dtype=settings["dtype"], prompts=settings["prompts"],
                               max_new_tokens=settings["max_new_tokens"], batch_size=settings["gen_batch_size"])
        rows.append({"model": model_name, "measurement": "generate_hf_ifeval", **g})
        print(f"[bench] {model_name} generation: {g['prompts']} prompts in {g['generate_s']:.1f} s", flush=True)
        save()
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
    out["complete"] = True
    save()
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as one Markdown table (what gpu_check prints); ``busy`` is the profiled step's device busy
    share of its wall time (host-bound when well below 1)."""
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    lines = ["| model | measurement | kernels | tokens/s | step s | MFU 6N | MFU 4N | busy | ratio | time s | peak GiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        busy = (r.get("profile") or {}).get("device_busy_share")
        lines.append(f"| {r['model']} | {r['measurement']} | {kernels_label(r)} | {f(r.get('tokens_per_s'), '.0f')} | "
                     f"{f(r.get('step_s', r.get('distill_step_s')), '.4f')} | {f(r.get('mfu_6n'), '.3f')} | "
                     f"{f(r.get('mfu_4n'), '.3f')} | {f(busy, '.2f')} | "
                     f"{f(r.get('ratio'), '.2f')} | {f(r.get('generate_s'), '.2f')} | {f(r.get('peak_mem_gib'), '.2f')} |")
    return "\n".join(lines)


def kernels_label(row: Mapping[str, Any]) -> str:
    """How a row's step ran: ``eager`` or ``compiled`` (ifdistill; ``TRL`` for TRL's), ``+ liger``; ``-`` for
    rows that are not training steps."""
    if "trl" in row:
        return "TRL" + (" + liger" if row.get("liger") else "")
    k = row.get("kernels")
    if not k:
        return "-"
    return ("compiled" if k["compiled_layers"] else "eager") + (" + liger" if k["liger"] else "")


def main(argv: Optional[list[str]] = None) -> None:
    from ifdistill.paths import cache_dir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes, a few steps, on CPU")
    ap.add_argument("--device", default=None, help="default: cuda (cpu with --cpu-smoke)")
    ap.add_argument("--models-root", default=None, help="where the random-init models are built (default: cache)")
    ap.add_argument("--only", nargs="*", default=(), help="model names to run (default: all)")
    ap.add_argument("--no-generation", action="store_true", help="leave out the HF backend's generation rows")
    ap.add_argument("--no-distill", action="store_true", help="leave out the distillation/SFT step ratio")
    ap.add_argument("--levers", action="store_true", default=None,
                    help="also each kernels lever alone at the first row length (eager, compiled, liger)")
    ap.add_argument("--no-trl", action="store_true", help="leave out TRL's rows")
    ap.add_argument("--seqs", type=int, nargs="+", default=None, help="tokens per packed row (default 4096 16384)")
    ap.add_argument("--json", default=None, help="written after every row, complete or not (see run_benchmark)")
    args = ap.parse_args(argv)
    import torch

    if not args.cpu_smoke and args.device is None and not torch.cuda.is_available():
        print("[bench] no CUDA device is visible: running the CPU smoke (--cpu-smoke) instead")
        args.cpu_smoke = True
    device = args.device or ("cpu" if args.cpu_smoke else "cuda")
    root = Path(args.models_root) if args.models_root else cache_dir() / "bench-gpu-models"
    overrides = {k: v for k, v in (("seqs", args.seqs), ("levers", args.levers), ("trl", False if args.no_trl else None))
                 if v is not None}
    out = run_benchmark(smoke=args.cpu_smoke, device=device, models_root=root, only=args.only,
                        generation=not args.no_generation, json_path=Path(args.json) if args.json else None,
                        distill=not args.no_distill, overrides=overrides)
    print(table(out["rows"]))


if __name__ == "__main__":
    main()
