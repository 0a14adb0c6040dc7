"""Small local datasets in the schemas of three lm-eval tasks, and task YAMLs that run lm-eval's real
definitions on them (``include:`` the installed task file, replace only the dataset).

- ``gsm8k_local`` (generate_until, regex filters, exact_match): ``{"question", "answer"}`` rows whose
  answer ends in ``#### <number>``, as openai/gsm8k; 2-shot from the train split, 24 new tokens;
- ``commonsense_qa_local`` (multiple_choice, acc): tau/commonsense_qa's ``{"id", "question",
  "question_concept", "choices": {"label", "text"}, "answerKey"}``;
- ``wikitext_local`` (loglikelihood_rolling; word/byte perplexity, bits per byte): ``{"page"}``.

Offline: ``dataset_path: json`` with ``data_files``; nothing reaches a hub. :func:`write_tasks` also
and :func:`write_broken_tasks` writes a variant for the input-error tests.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import lm_eval

TASKS_DIR = Path(lm_eval.__file__).parent / "tasks"
WORDS = ("apple", "river", "stone", "cloud", "garden", "window", "candle", "forest", "bridge", "market",
         "silver", "winter", "harbor", "meadow", "lantern", "pencil")


def _gsm8k(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        a, b = rng.randint(2, 40), rng.randint(2, 40)
        thing = rng.choice(WORDS)
        rows.append({"question": f"Sam has {a} {thing}s and buys {b} more. How many {thing}s does Sam have now?",
                     "answer": f"Sam has {a} + {b} = {a + b} {thing}s.\n#### {a + b}"})
    return rows


def _commonsense(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        picks = rng.sample(WORDS, 5)
        concept = rng.choice(WORDS)
        rows.append({"id": f"q{i}", "question": f"Where would you most likely keep a {concept}?",
                     "question_concept": concept, "choices": {"label": list("ABCDE"), "text": picks},
                     "answerKey": rng.choice("ABCDE")})
    return rows


def _pages(rng: random.Random, n: int) -> list[dict]:
    return [{"page": " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 40))) + " ."} for _ in range(n)]


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _yaml(path: Path, include: Path, task: str, files: dict[str, str], extra: str = "") -> None:
    data_files = "".join(f"    {split}: {file}\n" for split, file in files.items())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"include: {include}\ntask: {task}\ntag: []\ndataset_path: json\ndataset_name: null\n"
                    f"dataset_kwargs:\n  data_files:\n{data_files}{extra}")


def write_tasks(root: Path, *, n_test: int = 12, seed: int = 0) -> Path:
    """The three local tasks under ``root/tasks`` (an ``eval.lmeval.include_path``); returns that folder."""
    rng = random.Random(seed)
    data, tasks = root / "data", root / "tasks"
    gsm = {"train": _jsonl(data / "gsm8k_train.jsonl", _gsm8k(rng, 8)),
           "test": _jsonl(data / "gsm8k_test.jsonl", _gsm8k(rng, n_test))}
    _yaml(tasks / "gsm8k_local.yaml", TASKS_DIR / "gsm8k" / "gsm8k.yaml", "gsm8k_local", gsm,
          "num_fewshot: 2\ngeneration_kwargs:\n  until: [\"Question:\", \"</s>\", \"<|im_end|>\"]\n"
          "  do_sample: false\n  temperature: 0.0\n  max_gen_toks: 24\n")
    csqa = {"train": _jsonl(data / "csqa_train.jsonl", _commonsense(rng, 8)),
            "validation": _jsonl(data / "csqa_validation.jsonl", _commonsense(rng, n_test))}
    _yaml(tasks / "commonsense_qa_local.yaml", TASKS_DIR / "commonsense_qa" / "default.yaml", "commonsense_qa_local", csqa)
    pages = {split: _jsonl(data / f"wiki_{split}.jsonl", _pages(rng, 4 if split != "test" else n_test))
             for split in ("train", "validation", "test")}
    _yaml(tasks / "wikitext_local.yaml", TASKS_DIR / "wikitext" / "wikitext.yaml", "wikitext_local", pages)
    return tasks


def write_broken_tasks(root: Path) -> Path:
    """``gsm8k_nofield`` under ``root/broken``: gsm8k's definition on rows that have ``problem`` where the
    task reads ``question``."""
    rng = random.Random(1)
    broken = root / "broken"
    rows = [{"problem": r["question"], "answer": r["answer"]} for r in _gsm8k(rng, 4)]
    files = {"train": _jsonl(root / "data" / "nofield_train.jsonl", rows),
             "test": _jsonl(root / "data" / "nofield_test.jsonl", rows)}
    _yaml(broken / "gsm8k_nofield.yaml", TASKS_DIR / "gsm8k" / "gsm8k.yaml", "gsm8k_nofield", files, "num_fewshot: 0\n")
    return broken


TRAIN_RECIPE = {"version": 1, "steps": 40, "lr": 3e-3, "batch": 8, "seed": 0}


def _train_gsm8k_style(out: Path, base_dir: Path) -> None:
    """A few steps of plain language modelling on gsm8k-style question/answer pairs: the random-init
    model then answers in the task's shape (``Sam has ... #### n``, then ``Question:``, a stop string)
    instead of repeating one token, so the parity tests compare non-trivial responses and stops."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(TRAIN_RECIPE["seed"])
    threads = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)  # Qwen3's 151,936-entry head: 2 threads 1.5x faster than 1 here
    rng = random.Random(TRAIN_RECIPE["seed"])
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=TRAIN_RECIPE["lr"])
    model.train()
    try:
        for _ in range(TRAIN_RECIPE["steps"]):
            texts = ["".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in _gsm8k(rng, 2))
                     for _ in range(TRAIN_RECIPE["batch"])]
            enc = tokenizer(texts, return_tensors="pt", padding=True)
            labels = enc.input_ids.masked_fill(enc.attention_mask == 0, -100)
            model(**enc, labels=labels).loss.backward()
            opt.step()
            opt.zero_grad()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    for name in base_dir.iterdir():  # tokenizer files, chat template, generation_config.json
        if name.suffix in (".json", ".jinja", ".txt") and name.name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy(name, out / name.name)
    (out / "recipe.json").write_text(json.dumps(TRAIN_RECIPE) + "\n")


def trained_model(base_dir: str | Path) -> Path:
    """tiny_qwen3 after :func:`_train_gsm8k_style` (built once, cached like the other test models)."""
    import hashlib

    from ifdistill.paths import build_once, cache_dir

    base_dir = Path(base_dir)
    key = hashlib.sha256(json.dumps({**TRAIN_RECIPE, "base": base_dir.name}, sort_keys=True).encode()).hexdigest()[:12]
    return build_once(cache_dir() / "test-models" / f"lmeval-gsm8k-{key}", "recipe.json",
                      lambda tmp: _train_gsm8k_style(tmp, base_dir))
