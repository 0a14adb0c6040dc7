"""The judge's config section ``eval.judge`` (read by :mod:`ifdistill.evaluator.settings` into ``EvalSettings``).

A module of dataclasses only: the evaluator's settings schema imports it without importing the judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ifdistill.evaluator.identity import hashed_as

_BY_CONTENT = hashed_as("the judge model's content: judge.weights_digest and judge.tokenizer_sha256")


@dataclass
class JudgeModelSettings:
    """The judge model (a hub name, a local directory or ``builtin:tiny``), served by ``eval.backend``."""

    name_or_path: str = field(default="Qwen/Qwen3-8B", metadata=_BY_CONTENT)
    revision: Optional[str] = field(default=None, metadata=_BY_CONTENT)
    dtype: Optional[str] = field(default=None, metadata=hashed_as("judge.dtype, resolved"))  # null: eval.dtype
    # null: the judge tokenizer's own
    chat_template: Optional[str] = field(default=None, metadata=hashed_as(
        "the effective template's text, in judge.tokenizer_sha256"))
    enable_thinking: Optional[bool] = field(default=False, metadata=hashed_as("judge.enable_thinking"))
    # null: the judge's own context length
    max_model_len: Optional[int] = field(default=None, metadata=hashed_as("judge.context_len, resolved"))


@dataclass
class JudgeSettings:
    """An LLM judge of the evaluated model's responses (``benchmark: judge``;
    :mod:`ifdistill.benchmarks.judge`). Every key enters eval_config_hash (the judge's weights by content), each
    in the form :func:`~ifdistill.benchmarks.judge.run.with_judge` records (the mode by value)."""

    mode: str = "absolute"  # absolute (a rubric score per response) | pairwise (against ``reference``)
    model: JudgeModelSettings = field(default_factory=JudgeModelSettings)
    # the judge decodes greedily
    max_new_tokens: int = field(default=512, metadata=hashed_as("judge.decoding.max_new_tokens"))
    score_min: int = field(default=1, metadata=hashed_as("judge.score_range (mode absolute, the one that reads it)"))
    score_max: int = field(default=10, metadata=hashed_as("judge.score_range (mode absolute, the one that reads it)"))
    # placeholders {prompt} {response}
    absolute_template: str = field(default="", metadata=hashed_as("judge.template_sha256 in mode absolute"))
    # placeholders {prompt} {response_a} {response_b}
    pairwise_template: str = field(default="", metadata=hashed_as("judge.template_sha256 in mode pairwise"))
    # pairwise: a samples.jsonl (or its directory) of reference responses
    reference: Optional[str] = field(default=None, metadata=hashed_as(
        "the responses it holds: judge.reference_responses_sha256 (mode pairwise)"))


#: The sections this benchmark adds to ``eval`` (:func:`ifdistill.evaluator.settings.benchmark_sections`); its
#: registration finds them here (:meth:`~ifdistill.benchmarks.base.Benchmark.sections`).
SECTIONS = {"judge": JudgeSettings}
