"""Two lm-eval tasks on three local documents each, for lm-eval's smoke evaluation (the contract test).

They ``include:`` lm-eval's own definitions (gsm8k: generate_until with its regex filters; commonsense_qa:
multiple_choice) and replace only the dataset, so the smoke evaluation runs lm-eval's real request
types, filters and metrics offline in seconds. Generation stops after 8 tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

GENERATIVE, CHOICE = "smoke_gsm8k", "smoke_commonsense_qa"


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def write_tasks(folder: Path) -> list[str]:
    """The two task YAMLs and their data in ``folder`` (an ``eval.lmeval.include_path``); their names."""
    import lm_eval

    lib = Path(lm_eval.__file__).parent / "tasks"
    folder.mkdir(parents=True, exist_ok=True)
    sums = [{"question": f"What is {a} plus {b}?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}
            for a, b in ((2, 3), (4, 5), (7, 1))]
    gen = _jsonl(folder / "smoke_gsm8k.jsonl", sums)
    (folder / f"{GENERATIVE}.yaml").write_text(
        f"include: {lib / 'gsm8k' / 'gsm8k.yaml'}\ntask: {GENERATIVE}\ntag: []\ndataset_path: json\n"
        f"dataset_name: null\ndataset_kwargs:\n  data_files:\n    train: {gen}\n    test: {gen}\n"
        "generation_kwargs:\n  until: [\"Question:\"]\n  do_sample: false\n  max_gen_toks: 8\n")
    words = ("apple", "river", "stone", "cloud", "garden")
    questions = [{"id": f"q{i}", "question": f"Where would you keep a {w}?", "question_concept": w,
                  "choices": {"label": list("ABCDE"), "text": list(words)}, "answerKey": "ABCDE"[i]}
                 for i, w in enumerate(words[:3])]
    mc = _jsonl(folder / "smoke_commonsense_qa.jsonl", questions)
    (folder / f"{CHOICE}.yaml").write_text(
        f"include: {lib / 'commonsense_qa' / 'default.yaml'}\ntask: {CHOICE}\ntag: []\ndataset_path: json\n"
        f"dataset_name: null\ndataset_kwargs:\n  data_files:\n    train: {mc}\n    validation: {mc}\n")
    return [GENERATIVE, CHOICE]
