"""The multi-turn benchmark's config section ``eval.multiturn`` (read by :mod:`ifdistill.evaluator.settings`).

A module of dataclasses only: the evaluator's settings schema imports it without importing the benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ifdistill.evaluator.identity import hashed_as


@dataclass
class MultiTurnSettings:
    """How ``eval.data``'s single-turn IFEval rows become three-turn conversations
    (:mod:`ifdistill.benchmarks.ifeval_multiturn.conversations`); rows that are conversations already (the
    published IFBench multi-turn layout) are read as they are and none of this applies."""

    # draws each conversation's new constraint and its values (per item, from the item's key)
    seed: int = 0
    # the new constraints' instruction ids to draw from; empty: every id with a wording (wording.WORDINGS)
    instructions: List[str] = field(default_factory=list)
    # turn 2, the fixed assistant turn: a JSONL of {prompt, response} paired with the rows by prompt text.
    # null: GPT-4's published responses in the shared data folder (ifeval/input_response_data_gpt4_*.jsonl)
    responses: Optional[str] = field(default=None, metadata=hashed_as(
        "the conversations it makes: data.rows_sha256 (the responses are their assistant turns)"))


#: The sections this benchmark adds to ``eval`` (found by :meth:`ifdistill.benchmarks.base.Benchmark.sections`).
SECTIONS = {"multiturn": MultiTurnSettings}
