"""On-policy ICL distillation's settings: the shared distillation settings
(:class:`~ifdistill.methods.knowledge_distillation.settings.KDSettings`) with its own defaults (``kl=reverse``,
``kd_ratio=1``), plus the student's sampling, an EMA teacher and the monitoring; the one home of their
defaults and checks (:mod:`ifdistill.methods.sft.settings`).

:class:`~ifdistill.methods.onpolicy_distill.module.OnPolicyDistillModule` takes them as one object, and
Hydra composes ``method`` from the class (``schema/method_onpolicy_distill``, which
``conf/method/onpolicy_distill.yaml`` extends). The loss: ``kd_ratio * D(teacher, student) +
(1 - kd_ratio) * CE(gold completions)`` per counted token, a share ``lmbda`` of the examples on the
student's own sample. There is no teacher cache (the teacher reads the student's fresh samples).

``topk`` is a field the composed section holds only when a command line adds it (``+method.topk=K``,
:func:`ifdistill.config.only_when_set`): as a composed key it would add ``topk: null`` to every shipped
on-policy configuration and change its config hash, which covers the method section.

The ``sampled`` estimator (:mod:`.divergences`) is ``log p_s(y) - log p_t(y)`` at a token ``y`` the
student drew; its expectation is the reverse KL and its score-function gradient that of the reverse KL
only when ``y ~ p_s``, the student's own next-token distribution. Hence, with ``kl=sampled``:

- ``generation.temperature != 1``, ``generation.top_p < 1`` and ``generation.greedy`` are refused: they
  draw ``y`` from another distribution ``q`` (a softened, truncated or deterministic ``p_s``), which
  biases both the estimate and its gradient. Importance weights ``p_s(y) / q(y)`` are not offered:
  ``top_p`` and greedy decoding give ``q(y) = 0`` where ``p_s(y) > 0`` (no weight corrects a token that
  is never drawn), and below temperature 1 the weight ``p_s(y) / q(y)`` grows without bound as ``p_s(y)``
  falls (a high-variance estimate). ``kl=reverse`` takes the exact reverse KL at every position of such
  samples instead. ``top_k`` is not a setting: both engines sample without it.
- ``temperature != 1`` (of the divergence) is refused: the estimator is taken at the sampling
  distribution.
- ``topk`` is refused: the estimator reads the student's and the teacher's full-vocabulary
  log-probabilities of one token; a top-k renormalisation has no meaning there.

Gold rows (the ``1 - lmbda`` share, or every row at ``lmbda=0``) never get the sampled estimator: their
token was not drawn from the student, so there the estimate's expectation is not the reverse KL
(under a teacher-like data distribution it is ``-KL(p_t || p_s)``) and its gradient is that of a
squared log-ratio. They get the full-vocabulary reverse KL, the quantity the estimator estimates, so
``lmbda=0`` with ``kl=sampled`` is off-policy distillation with ``kl=reverse`` and ``train/kd`` is a
reverse-KL estimate on every row.

Staleness is a caveat, not a refusal: with ``engine=vllm`` and ``sync_every > 1`` the samples come
from weights up to ``sync_every - 1`` optimizer steps old; for ``sampled`` that biases the estimator
the same way (``y`` is drawn from an older ``p_s``), for the full-vocabulary kinds it only changes
which prefixes are visited. ``onpolicy/staleness_steps`` logs it.

The rules that read other sections or the data layer's keys (DeepSpeed, ``trainer.devices`` with
``engine=vllm``, per-example demonstrations) are
:meth:`~ifdistill.methods.onpolicy_distill.hooks.OnPolicyDistillHooks.config_problems`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from ifdistill.config import only_when_set
from ifdistill.methods.knowledge_distillation.settings import KDSettings
from ifdistill.methods.sft.settings import out_of_range

ENGINES = ("hf", "vllm")
ACTIONS = ("warn", "stop")  # on_eos_collapse


@dataclasses.dataclass(frozen=True)
class SamplingSettings:
    """The student's sampling (``method.generation``; :mod:`.sampling`)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    greedy: bool = False

    def __post_init__(self):
        if self.temperature <= 0 or not 0 < self.top_p <= 1 or self.max_new_tokens < 1:
            raise ValueError(f"generation: temperature > 0, 0 < top_p <= 1, max_new_tokens >= 1; got {self}")


GENERATION_KEYS = tuple(f.name for f in dataclasses.fields(SamplingSettings))


@dataclass
class OnPolicyDistillSettings(KDSettings):
    lmbda: float = 0.5  # share of examples trained on a student sample (0: off-policy distillation)
    # forward | reverse | jsd | sampled (the sampled-token reverse-KL estimator, on sampled rows only: gold rows
    # get the full reverse KL it estimates; it needs samples from the student's own distribution, so
    # generation.temperature=1, top_p=1, greedy false: problems())
    kl: str = "reverse"
    kd_ratio: float = 1.0  # 1: no CE term; < 1: CE on the gold completions with weight 1 - kd_ratio
    topk: Optional[int] = only_when_set()  # +method.topk=K: compare on the teacher's top-K tokens (not sampled)
    # frozen_initial (LoRA: adapter disabled) | ema | self_stopgrad (the live student)
    teacher: str = "frozen_initial"
    ema_decay: float = 0.99  # teacher=ema: p_ema <- ema_decay * p_ema + (1 - ema_decay) * p after each step
    skip_tokens: int = 0  # completion tokens neither trained nor counted at the start of each completion
    # the student's sampling (SamplingSettings: temperature, top_p, max_new_tokens, greedy; no top_k); stop tokens
    # are the evaluator's (+ stop_token_ids); conf/method/onpolicy_distill.yaml states the shipped choice
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

    #: ``ema``: a frozen copy updated after every optimizer step.
    teachers: ClassVar[tuple[str, ...]] = ("frozen_initial", "ema", "self_stopgrad")

    @classmethod
    def divergences(cls) -> tuple[str, ...]:
        """The shared divergences and the ``sampled`` estimator (:data:`.divergences.KINDS`)."""
        from ifdistill.methods.onpolicy_distill.divergences import KINDS

        return KINDS

    def problems(self) -> list[str]:
        """The shared checks, this method's ranges and choices, the sampling, and what ``kl=sampled`` needs
        (module docstring)."""
        problems = super().problems() + out_of_range(self, (
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
        ))
        if self.kl == "sampled":
            if float(self.temperature) != 1.0:
                problems.append(f"kl=sampled needs temperature=1 (the estimator is taken at the sampling "
                                f"distribution), got {self.temperature}")
            if self.topk is not None:
                problems.append(f"kl=sampled reads one token's full-vocabulary log-probabilities: topk "
                                f"(got {self.topk}) applies to kl=forward|reverse|jsd only")
        return problems + self.generation_problems()

    def generation_problems(self) -> list[str]:
        """Unknown ``generation`` keys and values :class:`SamplingSettings` refuses; for ``kl=sampled``,
        sampling that is not the student's own distribution."""
        generation = dict(self.generation or {})
        unknown = sorted(set(map(str, generation)) - set(GENERATION_KEYS))
        if unknown:
            return [f"generation: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                    f"(known: {', '.join(GENERATION_KEYS)})"]
        try:
            g = SamplingSettings(**generation)
        except ValueError as err:
            return [str(err)]
        off = [f"{k}={getattr(g, k)}" for k, bad in (("temperature", float(g.temperature) != 1.0),
                                                      ("top_p", float(g.top_p) < 1.0), ("greedy", bool(g.greedy)))
               if bad]
        if self.kl != "sampled" or not off:
            return []
        return [f"kl=sampled needs samples from the student's own distribution, but generation has "
                f"{', '.join(off)}: the sampled-token estimator is then biased (use temperature 1, top_p 1, "
                f"greedy false, or kl=reverse for the exact reverse KL at these samples)"]
