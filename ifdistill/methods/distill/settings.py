"""Off-policy ICL distillation's settings: the shared distillation settings
(:class:`~ifdistill.methods.knowledge_distillation.settings.KDSettings`) plus a separate teacher model and the
teacher cache; the one home of their defaults and checks (:mod:`ifdistill.methods.sft.settings`).

:class:`~ifdistill.methods.distill.module.ICLDistillModule` takes them as one object, and Hydra composes
``method`` from the class (``schema/method_distill``, which ``conf/method/distill.yaml`` extends): the composed
section holds every key at its default, so any key can be overridden without ``+``, and the YAML states only
the data layer's keys (``k``, ``demos``) and wiring. The rule that reads the data layer's ``demos`` (a cache
needs per-example demonstrations) is :meth:`~ifdistill.methods.distill.hooks.DistillHooks.config_problems`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from ifdistill.methods.knowledge_distillation.settings import KDSettings
from ifdistill.methods.sft.settings import out_of_range

TEACHER_SOURCES = ("online", "cache")


@dataclass
class DistillSettings(KDSettings):
    teacher_model: Optional[dict[str, Any]] = None  # teacher=separate: a model section {name_or_path, dtype, revision}
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

    #: ``separate``: the ``teacher_model`` section, loaded frozen.
    teachers: ClassVar[tuple[str, ...]] = ("frozen_initial", "separate", "self_stopgrad")

    def problems(self) -> list[str]:
        """The shared checks, the cache's sizes, a separate teacher's model, and what a cached teacher can
        hold: the forward KL of a frozen teacher on its full support."""
        problems = super().problems() + out_of_range(self, (
            ("cache_k", lambda v: int(v) >= 1, ">= 1"),
            ("cache_batch_size", lambda v: int(v) >= 1, ">= 1"),
            ("cache_views_per_shard", lambda v: int(v) >= 1, ">= 1"),
            ("cache_claim_expiry_s", lambda v: float(v) > 0, "> 0"),
        ))
        if self.teacher == "separate" and not self.teacher_model:
            problems.append("teacher=separate needs teacher_model (name_or_path, dtype, ...)")
        if self.teacher_source not in TEACHER_SOURCES:
            problems.append(f"teacher_source: must be one of {', '.join(TEACHER_SOURCES)}, got {self.teacher_source!r}")
        elif self.teacher_source == "cache":
            if not self.cache_dir:
                problems.append("teacher_source=cache needs cache_dir")
            if self.teacher == "self_stopgrad":
                problems.append("teacher_source=cache needs a frozen teacher (frozen_initial or separate), "
                                "not self_stopgrad")
            if self.kl != "forward" or self.topk:
                problems.append("teacher_source=cache computes the forward KL on the cached support: set "
                                "kl=forward, topk=null")
        return problems
