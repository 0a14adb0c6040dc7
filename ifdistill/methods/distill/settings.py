"""Off-policy ICL distillation's settings: the one home of their defaults (:mod:`ifdistill.methods.sft.settings`).

:class:`~ifdistill.methods.distill.module.ICLDistillModule` takes them as one object, and Hydra composes
``method`` from the class (``schema/method_distill``, which
``conf/method/distill.yaml`` extends): the composed section holds every key at its default, so any key can
be overridden without ``+``, and the YAML states only the data layer's keys (``k``, ``demos``) and wiring.
The loss: ``kd_ratio * D(teacher, student) + (1 - kd_ratio) * CE`` on the completion tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from ifdistill.methods.sft.settings import SFTSettings


@dataclass
class DistillSettings(SFTSettings):
    kd_ratio: float = 0.5
    kl: str = "forward"  # forward = KL(teacher||student) | reverse = KL(student||teacher) | jsd
    beta: float = 0.5  # jsd only: weight of the teacher in the mixture (0 < beta < 1)
    temperature: float = 1.0  # both distributions softened by T; the divergence is scaled by T^2
    teacher: str = "frozen_initial"  # frozen_initial (LoRA: adapter disabled, no copy) | separate | self_stopgrad
    teacher_model: Optional[dict[str, Any]] = None  # teacher=separate: a model section {name_or_path, dtype, revision}
    topk: Optional[int] = None  # compare on the teacher's top-k tokens only (both renormalised)
    # Where the teacher comes from: online (run every step) | cache (computed once by the teacher pass,
    # teacher_pass_runner.py, and read by every run whose teacher views are the same; needs demos=per_example
    # or k=0, a frozen teacher and kl=forward). The cache is content-addressed under cache_dir (teacher
    # weights' sha256, dtype, V, cache_k, temperature), so one folder serves a sweep.
    teacher_source: str = "online"
    cache_dir: Optional[str] = None  # conf/method/distill.yaml: ${paths.output_root}/teacher_cache
    # teacher's top-k stored per position (+ the tail mass); k >= V: exact. 64: gradient cosine 0.9993 with
    # the online objective at Qwen3's V, 389 bytes/token (k=16: 0.996, k=256: 1.0000 at 4x the bytes;
    # bench/bench_teacher_cache.py, trained tiny_qwen3)
    cache_k: int = 64
    cache_batch_size: int = 1  # teacher views per forward in the pass (1: no padding, bitwise reproducible)
    # Jobs that fill one cache_dir at once (a sweep's runs, DDP ranks, pass tasks) share the views: each claims
    # a batch of views (a claim file per view, O_CREAT|O_EXCL), computes them into one shard, and waits for
    # the views others claimed (teacher_pass_claims.py). A job that stops beating for cache_claim_expiry_s (its
    # heartbeat is rewritten every sixth of it) loses its claims to the others. Neither changes a cached
    # number (both are left out of the config hash).
    cache_views_per_shard: int = 64  # views per claim and per shard: smaller balances jobs finer, makes more files
    cache_claim_expiry_s: float = 300.0  # above NFS attribute-cache times (<= 60 s by default), below a pass's length

    def __post_init__(self) -> None:
        problems = divergence_value_problems(self) + [
            f"{key}: must be {what}, got {getattr(self, key)}"
            for key, ok, what in (("cache_k", lambda v: int(v) >= 1, ">= 1"),
                                  ("cache_batch_size", lambda v: int(v) >= 1, ">= 1"),
                                  ("cache_views_per_shard", lambda v: int(v) >= 1, ">= 1"),
                                  ("cache_claim_expiry_s", lambda v: float(v) > 0, "> 0"))
            if not ok(getattr(self, key))]
        if problems:
            raise ValueError(problems[0])


def divergence_value_problems(s: Any) -> list[str]:
    """Out-of-range values of the settings every distillation method's objective reads (``kd_ratio``, ``beta``,
    ``temperature``, ``topk``), one line each starting with its key: the settings classes' ``__post_init__``
    raises the first. ``topk=0`` is refused, not read as "off" (``null`` is the full vocabulary)."""
    problems = []
    if not 0.0 <= float(s.kd_ratio) <= 1.0:
        problems.append(f"kd_ratio: must be in [0, 1], got {s.kd_ratio}")
    if not 0.0 < float(s.beta) < 1.0:
        problems.append(f"beta: must be in (0, 1) (jsd's weight of the teacher), got {s.beta}")
    if not float(s.temperature) > 0.0:
        problems.append(f"temperature: must be > 0, got {s.temperature}")
    if s.topk is not None and int(s.topk) < 1:
        problems.append(f"topk: must be null (the full vocabulary) or >= 1, got {s.topk}")
    return problems


TEACHERS = ("frozen_initial", "separate", "self_stopgrad")
TEACHER_SOURCES = ("online", "cache")


def setting_problems(method: Mapping[str, Any], *, divergences: Sequence[str],
                     teachers: Sequence[str] = TEACHERS) -> list[str]:
    """The choices of a ``method`` section (a key it lacks has its default here) the module cannot train with,
    one line each naming its key: what preflight reports (``DistillHooks.config_problems``) and the module's
    constructor raises, from one place. ``divergences``/``teachers``: the kinds the module class accepts (a
    subclass may add some). The ranges are the dataclass's own ``__post_init__``, which preflight runs on the
    section (:func:`ifdistill.config.settings_problems`) and which checked the module's settings as they
    were made."""
    m = {**vars(DistillSettings()), **method}
    problems = []
    if m["kl"] not in divergences:
        problems.append(f"method.kl: must be one of {', '.join(divergences)}, got {m['kl']!r}")
    if m["teacher"] not in teachers:
        problems.append(f"method.teacher: must be one of {', '.join(teachers)}, got {m['teacher']!r}")
    if m["teacher"] == "separate" and not m["teacher_model"]:
        problems.append("method.teacher=separate needs method.teacher_model (name_or_path, dtype, ...)")
    if m["teacher_source"] not in TEACHER_SOURCES:
        problems.append(f"method.teacher_source: must be one of {', '.join(TEACHER_SOURCES)}, "
                        f"got {m['teacher_source']!r}")
    elif m["teacher_source"] == "cache" and not m["cache_dir"]:
        problems.append("method.teacher_source=cache needs method.cache_dir")
    refusal = cache_refusal(method)
    return problems + ([refusal] if refusal else [])


def cache_refusal(method: Mapping[str, Any]) -> Optional[str]:
    """Why the ``method`` section cannot read a teacher cache (``None``: it can, or it does not ask to); a key
    it lacks has :class:`DistillSettings`' default, and without the data layer's ``k`` (the module's own
    check) the demonstrations are not judged."""
    method = {**vars(DistillSettings()), **method}
    if method["teacher_source"] != "cache":
        return None
    if int(method.get("k") or 0) > 0 and method.get("demos") == "shared":
        return ("method.teacher_source=cache needs method.demos=per_example: shared demonstrations make a "
                "teacher view depend on its batch, so no cached view would serve another run")
    if method["teacher"] == "self_stopgrad":
        return "method.teacher_source=cache needs a frozen teacher (frozen_initial or separate), not self_stopgrad"
    if method["kl"] != "forward" or method["topk"]:
        return "method.teacher_source=cache computes the forward KL on the cached support: set kl=forward, topk=null"
    return None
