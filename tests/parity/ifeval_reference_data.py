"""google's IFEval prompts and GPT-4's published responses, paired the way the reference pairs them.

The two files (``input_data.jsonl`` and ``input_response_data_gpt4_20231107_145030.jsonl`` in the
shared data folder) have 541 lines in the same order. On one line (index 339, key 2785) the
response file carries an older wording of the prompt, so a join by prompt text alone would lose it.
The reference pairs **by exact prompt text first**; an input whose prompt is not found takes **the
response on the same line index**. The row is always scored with the *input's* prompt, instruction
list and kwargs. This module reproduces that pairing so that tests, benchmarks and reports all
score the same 541 rows (834 instructions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ifdistill.paths import shared_data_dir

GPT4_RESPONSES_FILE = "input_response_data_gpt4_20231107_145030.jsonl"

#: Reference aggregates of GPT-4's responses (followed / total), from the shared notes.
GPT4_REFERENCE_COUNTS = {
    "prompt_level_strict_acc": (417, 541),
    "inst_level_strict_acc": (698, 834),
    "prompt_level_loose_acc": (431, 541),
    "inst_level_loose_acc": (714, 834),
}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def pair_responses(
    inputs: list[dict[str, Any]], responses: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Rows ``{key, prompt, instruction_id_list, kwargs, response}``, one per input, in input order.

    Pairs by exact prompt text (the first response with that prompt), falling back to the response
    at the same index; raises ``ValueError`` if neither exists.
    """
    by_prompt: dict[str, str] = {}
    for item in responses:
        by_prompt.setdefault(item["prompt"], item["response"])
    rows = []
    for index, inp in enumerate(inputs):
        if inp["prompt"] in by_prompt:
            response = by_prompt[inp["prompt"]]
        elif index < len(responses):
            response = responses[index]["response"]
        else:
            raise ValueError(f"no response for input {index} (key {inp.get('key')})")
        row = {k: inp[k] for k in ("key", "prompt", "instruction_id_list", "kwargs") if k in inp}
        row["response"] = response
        rows.append(row)
    return rows


def load_gpt4_rows(data_dir: Path | None = None) -> list[dict[str, Any]]:
    """The 541 IFEval inputs paired with GPT-4's responses (see the module docstring)."""
    folder = Path(data_dir) if data_dir is not None else shared_data_dir() / "ifeval"
    return pair_responses(
        read_jsonl(folder / "input_data.jsonl"), read_jsonl(folder / GPT4_RESPONSES_FILE)
    )
