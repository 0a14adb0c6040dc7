"""The judge's config section ``eval.judge`` (read by :mod:`ifdistill.evaluator.settings` into ``EvalSettings``).

A module of dataclasses only: the evaluator's settings schema imports it without importing the judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class JudgeModelSettings:
    """The judge model (a hub name, a local directory or ``builtin:tiny``), served by ``eval.backend``."""

    name_or_path: str = "Qwen/Qwen3-8B"
    revision: Optional[str] = None
    dtype: Optional[str] = None  # null: eval.dtype
    chat_template: Optional[str] = None  # null: the judge tokenizer's own
    enable_thinking: Optional[bool] = False
    max_model_len: Optional[int] = None  # null: the judge's own context length


@dataclass
class JudgeSettings:
    """An LLM judge of the evaluated model's responses (``benchmark: judge``;
    :mod:`ifdistill.evaluator.judge`). Every key enters eval_config_hash (the judge's weights by content)."""

    mode: str = "absolute"  # absolute (a rubric score per response) | pairwise (against ``reference``)
    model: JudgeModelSettings = field(default_factory=JudgeModelSettings)
    max_new_tokens: int = 512  # the judge decodes greedily
    score_min: int = 1
    score_max: int = 10
    absolute_template: str = ""  # placeholders {prompt} {response}
    pairwise_template: str = ""  # placeholders {prompt} {response_a} {response_b}
    reference: Optional[str] = None  # pairwise: a samples.jsonl (or its directory) of reference responses


#: The sections this benchmark adds to ``eval`` (:func:`ifdistill.evaluator.settings.benchmark_sections`).
SECTIONS = {"judge": JudgeSettings}
