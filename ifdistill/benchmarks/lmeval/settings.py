"""lm-eval's config section ``eval.lmeval`` (read by :mod:`ifdistill.evaluator.settings` into ``EvalSettings``).

A module of dataclasses only: the evaluator's settings schema imports it without importing lm-eval.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from ifdistill.evaluator.identity import hashed_as


@dataclass
class LMEvalSettings:
    """lm-evaluation-harness tasks run through the evaluator's engine (``benchmark: lmeval``;
    :mod:`ifdistill.benchmarks.lmeval`). Every key enters eval_config_hash (``include_path`` by what it holds)."""

    tasks: List[str] = field(default_factory=list)  # task, group or tag names lm-eval knows (or include_path adds)
    num_fewshot: Optional[int] = None  # null: each task's own default (lm-eval's rule: a task fixed at 0 stays 0)
    fewshot_seed: int = 1234  # lm-eval's default fewshot_random_seed
    limit: Optional[int] = None  # the first N documents of each task (a smoke test)
    apply_chat_template: bool = False
    fewshot_as_multiturn: bool = False  # demonstrations as earlier user/assistant turns (needs the chat template)
    # extra folders of task YAMLs (local datasets); a moved copy of the same tasks keeps the hash
    include_path: List[str] = field(default_factory=list, metadata=hashed_as(
        "what it holds: each task's resolved config and documents (tasks.<task>.config_sha256, docs_sha256)"))
    bootstrap_iters: int = 100000  # lm-eval's default: standard errors of non-mean aggregates


#: The sections this benchmark adds to ``eval`` (:func:`ifdistill.evaluator.settings.benchmark_sections`); its
#: registration finds them here (:meth:`~ifdistill.benchmarks.base.Benchmark.sections`).
SECTIONS = {"lmeval": LMEvalSettings}
