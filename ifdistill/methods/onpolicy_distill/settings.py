"""On-policy ICL distillation's settings: the one home of their defaults.

:class:`~ifdistill.methods.onpolicy_distill.module.OnPolicyDistillModule` takes these as keyword arguments
whose defaults read this dataclass, and Hydra composes ``method`` from it (``schema/method_onpolicy_distill``,
which ``conf/method/onpolicy_distill.yaml`` extends). The loss: ``kd_ratio * D(teacher, student) +
(1 - kd_ratio) * CE(gold completions)`` per counted token, a share ``lmbda`` of the examples on the
student's own sample.

``topk`` is the module's argument but not a field: it joins the section with ``+method.topk=K``, as before
the section was composed from this dataclass, so that the config hash of every shipped on-policy
configuration holds (a field would add ``topk: null`` to each, and the hash covers the method section).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ifdistill.config import store_target_schema


@dataclass
class OnPolicyDistillSettings:
    lmbda: float = 0.5  # share of examples trained on a student sample (0: off-policy distillation)
    # forward | reverse | jsd | sampled (the sampled-token reverse-KL estimator, on sampled rows only: gold rows
    # get the full reverse KL it estimates; it needs samples from the student's own distribution, so
    # generation.temperature=1, top_p=1, greedy false; checks.py)
    kl: str = "reverse"
    kd_ratio: float = 1.0  # 1: no CE term; < 1: CE on the gold completions with weight 1 - kd_ratio
    beta: float = 0.5  # jsd only
    temperature: float = 1.0  # of the divergence (sampled: 1 only); +method.topk=K: the teacher's top-K (not sampled)
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


#: The settings' defaults, read by the module's signature.
DEFAULTS = OnPolicyDistillSettings()

store_target_schema("method_onpolicy_distill", OnPolicyDistillSettings)
