"""Export a training checkpoint as HF directories the evaluator loads like any model.

Layout of ``exports/step_XXXXXX/`` (written to a temp name, then renamed: a half-written export is never
taken for one; a full disk or a refused write removes the temp folder and raises
:class:`~ifdistill.write_failures.WriteFailed` naming the export and the free space):

- ``adapter/``  the LoRA adapter (``adapter_config.json`` + weights) and the tokenizer — with PEFT;
- ``merged/``   full weights with the adapter merged, plus tokenizer — with PEFT and ``merged=True``;
- ``model/``    full weights and tokenizer — full fine-tuning;
- ``export.json`` step, config_hash, kind, base model, sha256 of every weight file.

Every rank must call :func:`export_checkpoint` (gathering sharded weights is a collective); only global
rank 0 writes. Sharded parameters are gathered to a full CPU state dict first: DeepSpeed ZeRO-3 through
``GatheredParameters``, FSDP2 through ``get_model_state_dict(full_state_dict=True, cpu_offload=True)``;
DDP/ZeRO-2/single-process models hold full weights already.

The merged export is built the way a user would build it — base weights from disk, the exported adapter
loaded with ``PeftModel.from_pretrained``, then ``merge_and_unload`` — so it also proves the adapter
reloads, and training weights are never merged and unmerged in place (that would perturb them).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ifdistill.hashing import weight_hashes
from ifdistill.runs.rundir import EXPORT_JSON, export_temp_prefix, step_dir_name
from ifdistill.train.modeling import is_peft
from ifdistill.write_failures import writing


def full_state_dict(trainer: Any, model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """Full (unsharded) CPU state dict on global rank 0, None elsewhere. Collective: call on all ranks."""
    from lightning.pytorch.strategies import DeepSpeedStrategy, ModelParallelStrategy

    strategy = trainer.strategy
    rank0 = trainer.is_global_zero
    if isinstance(strategy, DeepSpeedStrategy) and getattr(strategy, "zero_stage_3", False):
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
            return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()} if rank0 else None
    if isinstance(strategy, ModelParallelStrategy):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k: v.detach().cpu().clone() for k, v in sd.items()} if rank0 else None
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()} if rank0 else None


def _save_tokenizer(tokenizer_src: str, dest: Path, chat_template: str | None) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_src)
    if chat_template:
        tok.chat_template = chat_template
    tok.save_pretrained(dest)


def _merge(base_model: str, adapter_dir: Path, dest: Path, dtype: torch.dtype) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_model, dtype=dtype)
    merged = PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()
    merged.save_pretrained(dest, safe_serialization=True)


def export_checkpoint(trainer: Any, model: torch.nn.Module, exports_root: str | os.PathLike, *, step: int,
                      base_model: str, tokenizer_src: str, config_hash: str = "", merged: bool = False,
                      chat_template: str | None = None, dtype: torch.dtype = torch.float32) -> Path | None:
    """Write ``exports_root/step_XXXXXX`` (rank 0) and return it; other ranks return None."""
    t0 = time.perf_counter()
    state = full_state_dict(trainer, model)
    if not trainer.is_global_zero:
        return None
    root = Path(exports_root)
    final = root / step_dir_name(step)
    with writing(final, "export"):  # a full disk or a refused write: one line naming the export
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=export_temp_prefix(step), dir=root))
        _write_export(tmp, final, model, state, t0, step=step, base_model=base_model, tokenizer_src=tokenizer_src,
                      config_hash=config_hash, merged=merged, chat_template=chat_template, dtype=dtype)
    return final


def _write_export(tmp: Path, final: Path, model: torch.nn.Module, state: dict, t0: float, *, step: int,
                  base_model: str, tokenizer_src: str, config_hash: str, merged: bool, chat_template: str | None,
                  dtype: torch.dtype) -> None:
    """Fill the temp folder ``tmp``, then rename it to ``final``; ``tmp`` is removed whatever happens."""
    try:
        kinds = []
        if is_peft(model):
            model.save_pretrained(tmp / "adapter", state_dict=state, safe_serialization=True)
            _save_tokenizer(tokenizer_src, tmp / "adapter", chat_template)
            kinds.append("adapter")
            if merged:
                _merge(base_model, tmp / "adapter", tmp / "merged", dtype)
                _save_tokenizer(tokenizer_src, tmp / "merged", chat_template)
                kinds.append("merged")
        else:
            model.save_pretrained(tmp / "model", state_dict=state, safe_serialization=True)
            _save_tokenizer(tokenizer_src, tmp / "model", chat_template)
            kinds.append("model")
        info = {"step": int(step), "config_hash": config_hash, "kinds": kinds, "base_model": base_model,
                "weights": weight_hashes(tmp, recursive=True), "export_seconds": round(time.perf_counter() - t0, 3),
                "time": time.time()}
        (tmp / EXPORT_JSON).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
        tmp.chmod(0o755)
        if final.exists():  # an export of the same step from an earlier (resumed) attempt
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_export(export_dir: str | os.PathLike) -> dict:
    path = Path(export_dir) / EXPORT_JSON
    if not path.is_file():
        raise FileNotFoundError(f"{export_dir} is not a finished export (no export.json)")
    return json.loads(path.read_text())
