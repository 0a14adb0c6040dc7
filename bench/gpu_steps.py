"""The training step and its data, on any device: what the GPU benchmark, its host proxy and the GPU tests run.

:mod:`bench.bench_gpu`, :mod:`bench.trl_peer`, ``bench/bench_host_overhead.py`` and ``tests/gpu/`` share these
so that every measurement and every tolerance test runs the same step (``bench/bench_gpu.py``'s docstring
says what one step is): the shapes of the real models and their random-init builder, the step itself
(:func:`train_step`, :func:`make_optimizer`, :func:`autocast`), the synthetic data in packed rows or padded
batches, interleaved timing, and the device's synchronisation and peak-memory probes.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any, Mapping, Optional

ROOT = Path(__file__).resolve().parents[1]

# -- shapes --------------------------------------------------------------------------------------------
_ROPE, _EPS, _VOCAB = 1000000.0, 1e-6, 151936
SHAPES: dict[str, dict[str, Any]] = {
    # huggingface.co/Qwen/Qwen3-1.7B/blob/main/config.json (tie_word_embeddings: true)
    "Qwen3-1.7B": dict(arch="qwen3", hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=_VOCAB,
                       rope_theta=_ROPE, rms_norm_eps=_EPS, max_position_embeddings=40960, tie_word_embeddings=True),
    # huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json (tie_word_embeddings: true; head_dim = 896 / 14)
    "Qwen2.5-0.5B": dict(arch="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, head_dim=64, vocab_size=_VOCAB,
                         rope_theta=_ROPE, rms_norm_eps=_EPS, max_position_embeddings=32768, tie_word_embeddings=True),
}
SMOKE_SHAPES: dict[str, dict[str, Any]] = {
    "smoke-qwen3": dict(SHAPES["Qwen3-1.7B"], hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=4096),
    "smoke-qwen2": dict(SHAPES["Qwen2.5-0.5B"], hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=4096),
}
PEAK_BF16_FLOPS = (("H200", 989.4e12), ("H100 NVL", 835e12), ("H100 PCIe", 756e12), ("H100", 989.4e12),
                   ("A100", 312e12))
LORA = {"method": "lora", "r": 16, "alpha": 32, "dropout": 0.0}
FULL = {"method": "none"}
MARKER = "bench_gpu_model.json"


def peak_bf16_flops(device_name: str) -> Optional[float]:
    """Dense bf16 peak of a GPU named like ``torch.cuda.get_device_name()``; None when unknown."""
    for key, flops in PEAK_BF16_FLOPS:
        if key in device_name:
            return flops
    return None


def build_model_dir(name: str, shape: Mapping[str, Any], root: Path) -> Path:
    """A random-init model of ``shape`` with the Qwen3 tokenizer, built once into ``root/<name>`` (fp32).

    Reuses the embedded Qwen3's builder (:func:`ifdistill.models.tiny_qwen3.build_tiny_qwen3`; for Qwen2
    its :func:`~ifdistill.models.tiny.save_random_causal_lm`), which ties the embeddings as both real
    models do."""
    from ifdistill.models.tiny_qwen3 import TOKENIZER_FILES, TinyQwen3Spec, build_tiny_qwen3, qwen3_tokenizer_dir
    from ifdistill.paths import build_once

    if not shape["tie_word_embeddings"]:
        raise ValueError(f"{name}: the random-init builder ties embeddings; untied shapes are not supported")
    spec = TinyQwen3Spec(**{k: v for k, v in shape.items() if k not in ("arch", "tie_word_embeddings")})

    def build(tmp: Path) -> None:
        if shape["arch"] == "qwen3":
            build_tiny_qwen3(tmp, spec)
        else:
            from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

            from ifdistill.models.tiny import save_random_causal_lm

            for f in TOKENIZER_FILES:
                shutil.copyfile(qwen3_tokenizer_dir() / f, tmp / f)
            tok = AutoTokenizer.from_pretrained(tmp)
            save_random_causal_lm(tmp, Qwen2Config, Qwen2ForCausalLM, spec, vocab_size=spec.vocab_size,
                                  eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                  rope_theta=spec.rope_theta, rms_norm_eps=spec.rms_norm_eps)
        (tmp / MARKER).write_text(json.dumps({"name": name, **shape}, indent=2) + "\n")

    return build_once(root / name, MARKER, build)


# -- one training step, any device (the GPU tests call these too) -----------------------------------------
def autocast(device: str, precision: str):
    """Lightning's ``bf16-mixed`` (``torch.autocast`` on the device) or nothing for ``32-true``."""
    import torch

    if precision == "bf16-mixed":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    if precision == "32-true":
        return contextlib.nullcontext()
    raise ValueError(f"precision must be bf16-mixed or 32-true, got {precision!r}")


def place(module, device: str):
    """Move a training module to ``device`` as Lightning's fit does (the frozen teacher moves at fit start)."""
    module.to(device)
    module.on_fit_start()
    return module


def to_device(batch: Mapping[str, Any], device: str) -> dict[str, Any]:
    import torch

    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def mean_loss(module, batch: Mapping[str, Any], device: str, precision: str):
    """``(token-mean loss, stats)`` of ``module.objective`` on ``batch`` (the step's forward)."""
    with autocast(device, precision):
        loss_sum, stats = module.objective(to_device(batch, device))
    return loss_sum / stats["count"].clamp(min=1), stats


def train_step(module, batch: Mapping[str, Any], optimizer, device: str, precision: str, index: int = 0):
    """The production step (``bench/bench_gpu.py``'s docstring); returns the token-mean loss before the update (a device
    tensor: reading it is the caller's one synchronisation)."""
    import torch

    from ifdistill.train.nonfinite import finite_flag, skips_on_device

    with autocast(device, precision):
        loss = module.training_step(to_device(batch, device), index)  # token mean: one micro-batch per step
    finite_loss = torch.isfinite(loss.detach())
    loss.backward()
    params = [p for g in optimizer.param_groups for p in g["params"]]
    finite_grads = finite_flag([p.grad for p in params if p.grad is not None])
    if skips_on_device(optimizer):
        optimizer.found_inf = (~(finite_loss & finite_grads)).to(torch.float32)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def make_optimizer(module, lr: float = 1e-5):
    """The optimizer training configures (``SFTModule.configure_optimizers``: fused AdamW on CUDA)."""
    module.optim_cfg = {**module.optim_cfg, "lr": lr, "schedule": "constant"}
    return module.configure_optimizers()["optimizer"]


def production_chunk_size() -> Optional[int]:
    """``logit_chunk_size`` of ``conf/train.yaml``: the LM head as training runs it."""
    from omegaconf import OmegaConf

    return OmegaConf.load(ROOT / "conf" / "train.yaml").get("logit_chunk_size")


def sync(device: str) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device: str) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_gib(device: str) -> Optional[float]:
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return None


# -- data ----------------------------------------------------------------------------------------------
def model_cfg(model_dir: Path, dtype: str) -> dict[str, Any]:
    return {"name_or_path": str(model_dir), "dtype": dtype, "enable_thinking": False}


def data_cfg(model: Mapping[str, Any], n: int, k: Optional[int] = None):
    """The synthetic training set as training resolves it (``k``: ICL distillation, shared demonstrations)."""
    from ifdistill.data.build import DataConfig

    data = {"sources": [{"name": "syn", "synthetic": "train", "max_examples": n}], "heldout": 0, "max_length": 1024}
    return DataConfig.resolve(data, icl=None if k is None else {"k": k, "demos": "shared"}, model=model)


def row_groups(items: list[Mapping[str, Any]], row_tokens: int, count: int) -> list[list[Mapping[str, Any]]]:
    """``count`` groups of consecutive examples, each filling one row of up to ``row_tokens`` tokens."""
    groups, i = [], 0
    for _ in range(count):
        chosen, used = [], 0
        while len(items[i % len(items)]["input_ids"]) + used <= row_tokens:
            chosen.append(items[i % len(items)])
            used += len(items[i % len(items)]["input_ids"])
            i += 1
        if not chosen:
            raise ValueError(f"an example is longer than the row ({row_tokens} tokens)")
        groups.append(chosen)
    return groups


def packed_rows(items: list[Mapping[str, Any]], row_tokens: int, pad_id: int, count: int) -> list[dict]:
    """``count`` packed batches of one row each, filled with consecutive examples up to ``row_tokens``."""
    from ifdistill.data.collate import PackCollator

    collate = PackCollator(pad_id, max_row_tokens=row_tokens)
    return [collate(group) for group in row_groups(items, row_tokens, count)]


def batches_from(dm, count: int) -> list[dict]:
    dm.setup("fit")
    it = iter(dm.train_dataloader())
    return [next(it) for _ in range(count)]


# -- timing, the SFT rows' examples, what ran ----------------------------------------------------------
def time_interleaved(variants: dict[str, tuple[Any, list[dict]]], device: str, precision: str,
                     warmup: int, steps: int) -> dict[str, dict[str, Any]]:
    """Median step time of each ``name: (module, batches)``, the variants run step by step in turn."""
    optims = {name: make_optimizer(m) for name, (m, _) in variants.items()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    losses: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(warmup + steps):
        for name, (module, batches) in variants.items():
            sync(device)
            t0 = time.perf_counter()
            losses[name].append(float(train_step(module, batches[i], optims[name], device, precision, i)))
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return {name: {"step_s": statistics.median(t[warmup:]), "loss_first": losses[name][0],
                   "loss_last": losses[name][-1]} for name, t in times.items()}


def sft_items(model_dir: Path, model: Mapping[str, Any], seq: int) -> tuple[list[Mapping[str, Any]], int, int]:
    """``(items, seq, pad id)``: the synthetic set's examples that fit a row of ``seq`` tokens (the arguments of
    :func:`packed_rows` and, for TRL, :func:`row_groups`)."""
    from transformers import AutoTokenizer

    from ifdistill.data.build import build_train_dataset

    tok = AutoTokenizer.from_pretrained(model_dir)
    items = [it for it in build_train_dataset(data_cfg(model, n=max(64, 4 * seq // 100)), tok).train.items
             if len(it["input_ids"]) <= seq]
    return items, seq, tok.pad_token_id


def kernels_used(module) -> dict[str, Any]:
    """What ran of ``kernels`` (:mod:`ifdistill.train.kernels`): compiled layers, compiled objective, Liger."""
    from ifdistill.train import kernels
    from ifdistill.train.modeling import decoder_layers

    cuda = module.device.type == "cuda"
    compiled = kernels.compiled_layers(decoder_layers(module.model))
    runs = bool(compiled) and (cuda or not all(layer.forward.cuda_only for layer in compiled))
    return {"compiled_layers": len(compiled) if runs else 0,
            "compile_loss": module.compile_loss is True or (module.compile_loss == kernels.AUTO and cuda),
            "liger": kernels.liger_in(module.model), "backend": module.compile_options["backend"]}
