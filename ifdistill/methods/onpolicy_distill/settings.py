"""On-policy ICL distillation's settings: the one home of their defaults (:mod:`ifdistill.methods.sft.settings`).

:class:`~ifdistill.methods.onpolicy_distill.module.OnPolicyDistillModule` takes them as one object, and
Hydra composes ``method`` from the class (``schema/method_onpolicy_distill``, which
``conf/method/onpolicy_distill.yaml`` extends). The loss: ``kd_ratio * D(teacher, student) +
(1 - kd_ratio) * CE(gold completions)`` per counted token, a share ``lmbda`` of the examples on the
student's own sample.

``topk`` is a field the composed section holds only when a command line adds it (``+method.topk=K``,
:func:`ifdistill.config.only_when_set`): as a composed key it would add ``topk: null`` to every shipped
on-policy configuration and change its config hash, which covers the method section. The class extends
SFT's settings, not off-policy distillation's: it has no teacher cache (the teacher reads the student's
fresh samples) and other defaults (``kl=reverse``, ``kd_ratio=1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ifdistill.config import only_when_set
from ifdistill.methods.distill.settings import divergence_value_problems
from ifdistill.methods.sft.settings import SFTSettings

ENGINES = ("hf", "vllm")
ACTIONS = ("warn", "stop")  # on_eos_collapse


@dataclass
class OnPolicyDistillSettings(SFTSettings):
    lmbda: float = 0.5  # share of examples trained on a student sample (0: off-policy distillation)
    # forward | reverse | jsd | sampled (the sampled-token reverse-KL estimator, on sampled rows only: gold rows
    # get the full reverse KL it estimates; it needs samples from the student's own distribution, so
    # generation.temperature=1, top_p=1, greedy false; checks.py)
    kl: str = "reverse"
    kd_ratio: float = 1.0  # 1: no CE term; < 1: CE on the gold completions with weight 1 - kd_ratio
    beta: float = 0.5  # jsd only
    temperature: float = 1.0  # of the divergence (sampled: 1 only)
    topk: Optional[int] = only_when_set()  # +method.topk=K: compare on the teacher's top-K tokens (not sampled)
    teacher: str = "frozen_initial"  # frozen_initial (LoRA: adapter disabled) | ema | self_stopgrad (the live student)
    ema_decay: float = 0.99  # teacher=ema: p_ema <- ema_decay * p_ema + (1 - ema_decay) * p after each step
    skip_tokens: int = 0  # completion tokens neither trained nor counted at the start of each completion
    # the student's sampling (temperature, top_p, max_new_tokens, greedy; no top_k); stop tokens are the
    # evaluator's (+ stop_token_ids); conf/method/onpolicy_distill.yaml states the shipped choice
    generation: Optional[dict[str, Any]] = None
    stop_token_ids: list[int] = field(default_factory=list)
    sample_table_every: int = 50  # steps between W&B tables of samples (onpolicy/samples)
    sample_table_rows: int = 4
    min_eos_rate: float = 0.0  # > 0: act when the share of samples ending with a stop token stays below it
    eos_patience: int = 3  # ... for this many logging intervals in a row
    on_eos_collapse: str = "warn"  # warn | stop
    engine: str = "hf"  # hf (the training model's generate) | vllm (a colocated engine, vllm extra; trainer.devices=1)
    # engine=vllm: optimizer steps between weight pushes (1: strictly on-policy; > 1: samples from weights up
    # to sync_every - 1 steps old, which biases kl=sampled)
    sync_every: int = 1
    # engine=vllm: the evaluator's runtime settings (ifdistill/evaluator/settings.py) + max_model_len
    vllm: Optional[dict[str, Any]] = None

    def __post_init__(self) -> None:
        problems = [f"{key}: must be {what}, got {getattr(self, key)!r}" for key, ok, what in (
            ("lmbda", lambda v: 0.0 <= float(v) <= 1.0, "in [0, 1]"),
            ("ema_decay", lambda v: 0.0 <= float(v) < 1.0, "in [0, 1)"),
            ("skip_tokens", lambda v: int(v) >= 0, ">= 0"),
            ("sync_every", lambda v: int(v) >= 1, ">= 1"),
            ("sample_table_every", lambda v: int(v) >= 1, ">= 1"),
            ("sample_table_rows", lambda v: int(v) >= 0, ">= 0"),
            ("min_eos_rate", lambda v: 0.0 <= float(v) <= 1.0, "in [0, 1]"),
            ("eos_patience", lambda v: int(v) >= 1, ">= 1"),
            ("on_eos_collapse", lambda v: v in ACTIONS, f"one of {', '.join(ACTIONS)}"),
            ("engine", lambda v: v in ENGINES, f"one of {', '.join(ENGINES)}"),
        ) if not ok(getattr(self, key))]
        problems = divergence_value_problems(self) + problems
        if problems:
            raise ValueError(problems[0])
