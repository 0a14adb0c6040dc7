"""The settings ``method=onpolicy_distill`` refuses, and why; run by preflight and by the constructor.

:func:`setting_problems` reads the ``method`` section alone (no model), so preflight
(:meth:`~ifdistill.train.method.MethodHooks.config_problems`) reports a refused setting as one line,
exit 2, before a run directory exists; the constructor raises the same lines as a ``ValueError`` when
the module is built directly.

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

Every key of the section is a field of its settings class (:mod:`.settings`; preflight refuses any other)
or the data layer's (``k``, ``demos``, ``own_demo``); the keys of
``generation`` are :class:`~.sampling.SamplingSettings`'s fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ifdistill.methods.onpolicy_distill.divergences import KINDS
from ifdistill.methods.onpolicy_distill.sampling import SamplingSettings
from ifdistill.methods.onpolicy_distill.settings import OnPolicyDistillSettings

GENERATION_KEYS = tuple(f.name for f in dataclasses.fields(SamplingSettings))


def generation_problems(generation: Mapping[str, Any], kl: str) -> list[str]:
    """Unknown ``generation`` keys; for ``kl=sampled``, sampling that is not the student's own distribution."""
    unknown = sorted(set(map(str, generation)) - set(GENERATION_KEYS))
    if unknown:
        return [f"method.generation: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} "
                f"(known: {', '.join(GENERATION_KEYS)})"]
    if kl != "sampled":
        return []
    g = {**dataclasses.asdict(SamplingSettings()), **generation}
    off = [f"{k}={g[k]}" for k, bad in (("temperature", float(g["temperature"]) != 1.0),
                                        ("top_p", float(g["top_p"]) < 1.0), ("greedy", bool(g["greedy"]))) if bad]
    if not off:
        return []
    return [f"method.kl=sampled needs samples from the student's own distribution, but method.generation has "
            f"{', '.join(off)}: the sampled-token estimator is then biased (use temperature 1, top_p 1, "
            f"greedy false, or kl=reverse for the exact reverse KL at these samples)"]


def setting_problems(method: Mapping[str, Any]) -> list[str]:
    """Every refused setting of an on-policy ``method`` section, each one line naming its key (module docstring);
    a key the section lacks has :class:`OnPolicyDistillSettings`' default."""
    method = {**vars(OnPolicyDistillSettings()), **method}
    problems = []
    kl = method["kl"]
    if kl not in KINDS:
        problems.append(f"method.kl must be one of {KINDS}, got {kl!r}")
    if kl == "sampled":
        if float(method["temperature"]) != 1.0:
            problems.append(f"method.kl=sampled needs method.temperature=1 (the estimator is taken at the sampling "
                            f"distribution), got {method['temperature']}")
        if method["topk"] is not None:
            problems.append(f"method.kl=sampled reads one token's full-vocabulary log-probabilities: method.topk "
                            f"(got {method['topk']}) applies to kl=forward|reverse|jsd only")
    problems += generation_problems(dict(method["generation"] or {}), kl)
    return problems
