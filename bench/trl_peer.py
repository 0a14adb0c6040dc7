"""The peer measured in the same run as the GPU benchmark: TRL's ``SFTTrainer`` on what
:func:`bench.bench_gpu.measure_sft` trains (the ``bench`` extra; without TRL the benchmark leaves its rows out)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from bench.gpu_steps import model_cfg, peak_gib, reset_peak, row_groups, sft_items, sync, to_device


def trl_available() -> Optional[str]:
    """TRL's version, or ``None`` where it does not import (the ``bench`` extra)."""
    try:
        import trl
    except ImportError:
        return None
    return str(trl.__version__)


def measure_trl_sft(model_dir: Path, device: str, *, peft: Mapping[str, Any], dtype: str, precision: str, seq: int,
                    warmup: int, steps: int, peak_flops: Optional[float], attn_implementation: Optional[str]
                    ) -> dict[str, Any]:
    """TRL's ``SFTTrainer`` on what :func:`measure_sft` trains: the same model files, weights' dtypes (LoRA: the
    base in ``dtype``, float32 adapters; full: float32 master weights), attention kernel, examples and rows
    (TRL's padding-free collator on the same groups of examples: one flattened row, position ids and
    ``cu_seq_lens``), completion-only labels, LoRA r/alpha/targets, bf16 autocast, AdamW, clipping at 1.0;
    Liger's kernels on (``use_liger_kernel``) where liger-kernel imports on CUDA. One step is TRL's
    ``training_step`` (its fused LM head, entropy and accuracy metrics, accelerate's backward), clipping and the
    trainer's own optimizer."""
    import os

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from ifdistill.train import kernels
    from ifdistill.train.packed_attention import resolve_attn_implementation

    items, seq, pad = sft_items(model_dir, model_cfg(model_dir, dtype), seq)
    groups = row_groups(items, seq, warmup + steps)
    rows = [[{"input_ids": it["input_ids"].tolist(),
              "labels": [int(t) if m else -100 for t, m in zip(it["input_ids"], it["loss_mask"])]} for it in g]
            for g in groups]
    collate = DataCollatorForLanguageModeling(pad_token_id=pad, padding_free=True)
    batches = [to_device(collate(r), device) for r in rows]
    full = peft["method"] == "none"
    reset_peak(device)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32 if full else getattr(torch, dtype),
                                                 attn_implementation=resolve_attn_implementation(attn_implementation))
    liger = torch.device(device).type == "cuda" and kernels.liger_installed()
    cpu = torch.device(device).type == "cpu"
    args = SFTConfig(output_dir=os.environ.get("BENCH_TMP", tempfile.gettempdir() + "/bench-gpu-trl"),
                     per_device_train_batch_size=8, learning_rate=1e-5, lr_scheduler_type="constant", max_length=None,
                     logging_steps=10**6, save_strategy="no", report_to=[], bf16=precision == "bf16-mixed",
                     fp16=False, gradient_checkpointing=False, packing=False, padding_free=True,
                     completion_only_loss=True, use_cpu=cpu, seed=0, dataset_num_proc=None, max_grad_norm=1.0,
                     use_liger_kernel=liger)
    lora = None if full else LoraConfig(r=int(peft["r"]), lora_alpha=int(peft["alpha"]),
                                        lora_dropout=float(peft["dropout"]), task_type="CAUSAL_LM",
                                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                        "up_proj", "down_proj"])
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows[0]), peft_config=lora)
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's own loop, which is not running
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    times, losses = [], []
    for i in range(warmup + steps):
        sync(device)
        t0 = time.perf_counter()
        loss = trainer.training_step(trainer.model, dict(batches[i]))
        trainer.accelerator.clip_grad_norm_(params, 1.0)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss))
        sync(device)
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times[warmup:])
    tokens = statistics.median(int(b["input_ids"].shape[1]) for b in batches[warmup:])
    out = {"tokens_per_step": tokens, "step_s": step_s, "tokens_per_s": tokens / step_s, "trl": trl_available(),
           "liger": liger, "optimizer": type(trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer")
                                             else trainer.optimizer).__name__,
           "attn_implementation": model.config._attn_implementation, "peak_mem_gib": peak_gib(device),
           "loss_first": losses[0], "loss_last": losses[-1], "steps": steps}
    del trainer, model
    return out
