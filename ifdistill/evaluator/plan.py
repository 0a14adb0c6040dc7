"""``PlanBase``: what every benchmark's plan holds, apart from the code that builds each plan.

IFEval-style rows (:class:`ifdistill.evaluator.run.EvalPlan`) and lm-eval tasks
(:class:`ifdistill.evaluator.lmeval.run.LMEvalPlan`) extend it; the persistent server
(:mod:`ifdistill.evaluator.serve`) reads only these fields, so it serves every benchmark alike.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ifdistill.evaluator.model_source import ModelSource
from ifdistill.evaluator.settings import EvalRunSettings, EvalSettings


@dataclasses.dataclass(kw_only=True)
class PlanBase:
    """The model, its engine's needs and the identity, decided before any engine starts."""

    settings: EvalSettings
    run: EvalRunSettings
    model_cfg: dict[str, Any]
    source: ModelSource
    tokenizer: Any
    chat_template: str
    context_len: int
    fingerprint: dict[str, Any]
    eval_config_hash: str
    model_identity: dict[str, Any]
    prepare_s: float
