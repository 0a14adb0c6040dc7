"""Off-policy ICL distillation: the knowledge-distillation module
(:class:`~ifdistill.methods.knowledge_distillation.module.KDModule`: the teacher reads ``k`` demonstrations +
prompt + completion, the student prompt + completion, ``loss = kd_ratio * D(teacher, student) +
(1 - kd_ratio) * CE`` on the completion tokens) with what only this method has:

- a ``separate`` teacher (``teacher_model``: a ``model``-like section), loaded frozen, beside the shared
  ``frozen_initial`` and ``self_stopgrad``;
- the teacher source (``method.teacher_source``): ``online`` runs the teacher every step; ``cache`` reads its
  top-k log-probabilities and tail mass from the teacher cache (:mod:`ifdistill.methods.distill.teacher_cache`),
  filled at train start by the teacher pass (:mod:`ifdistill.methods.distill.teacher_pass_runner`: the views of
  the examples the run reads up to its last step that the cache lacks, shared with the other ranks and
  with other jobs through claims), extended on demand when a step reads a view past it, and optimises
  :func:`~ifdistill.train.losses.cached_kd_with_stats` (forward KL on the top-k plus a tail bucket; equal
  to the online objective at ``cache_k >= V``). Logged then: ``teacher/acc`` and ``teacher/topk_mass``
  instead of the teacher's CE and entropy (the cache does not hold them), and the pass's counts at its
  first step (also in ``run.json``, with the pass's share of the run's time).

Demonstrations (``method.k`` and ``method.demos``) are the data layer's business
(:class:`ifdistill.data.icl.IclSettings`); shared demonstrations per micro-batch are this method's batches
(:mod:`ifdistill.methods.distill.shared_demos`, :meth:`~ifdistill.methods.distill.hooks.DistillHooks.train_collator`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Optional

import torch

from ifdistill.methods.distill.hooks import DistillHooks
from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.methods.distill.teacher_cache import CachedTargets
from ifdistill.methods.knowledge_distillation.module import KDModule
from ifdistill.train.losses import cached_kd_with_stats
from ifdistill.train.method import TrainingInputs
from ifdistill.train.modeling import SelectiveLM, build_model
from ifdistill.train.token_sums import ratio


class ICLDistillModule(DistillHooks, KDModule):
    """Logit distillation from an in-context (k-shot) teacher, online or from its cache."""

    def __init__(self, inputs: TrainingInputs, settings: Optional[DistillSettings] = None):
        built = time.perf_counter()  # the run's time, for the pass's share of it, counts the model's loading
        s = settings if settings is not None else self.settings_class()
        super().__init__(inputs, s)
        self.teacher_cache = None
        self.teacher_pass_stats: Optional[dict[str, float]] = None
        if s.teacher_source == "cache":
            from ifdistill.methods.distill.teacher_cache import TeacherCache
            from ifdistill.methods.distill.teacher_pass_runner import RunPassReport, teacher_namespace

            self.teacher_pass = RunPassReport(started=built)

            lm = self._frozen[0] if self._frozen else self.lm
            head = lm.output_head()
            self.teacher_cache = TeacherCache(s.cache_dir, teacher_namespace(
                s.teacher_model if s.teacher == "separate" else inputs.model, dtype=str(head.weight.dtype),
                vocab_size=head.weight.shape[0], k=s.cache_k, temperature=s.temperature,
                quantize=(inputs.peft or {}).get("quantize") if s.teacher == "frozen_initial" else None))

    def frozen_teacher(self, inputs: TrainingInputs, s: DistillSettings) -> Optional[SelectiveLM]:
        """``separate``: the teacher model, built frozen; else the shared teachers'."""
        if s.teacher != "separate":
            return super().frozen_teacher(inputs, s)
        return SelectiveLM(build_model(s.teacher_model, None, dtype=inputs.dtype or s.teacher_model.get("dtype"),
                                       attn_implementation=inputs.attn_implementation or "sdpa", trainable=False))

    def _train_keys(self) -> tuple[str, ...]:
        return super()._train_keys() + ("teacher_mass",)

    def on_train_start(self) -> None:
        """The teacher pass, here because a resumed run's step is restored by now: it covers the steps left."""
        if self.teacher_cache is not None:
            from ifdistill.methods.distill.teacher_pass_runner import run_first_pass

            self.teacher_pass_stats = run_first_pass(self, self.trainer)
        super().on_train_start()  # then the step-0 validation, as for SFT

    def on_train_end(self) -> None:
        if self.teacher_cache is not None:
            from ifdistill.methods.distill.teacher_pass_runner import run_pass_end

            self.teacher_pass_stats = run_pass_end(self, self.trainer)

    def objective(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if self.teacher_cache is None:
            return super().objective(batch)
        rows, s_cols, _, targets = self.completion_index(batch)
        cached = self.cached_teacher(batch)
        return self.head_objective(lambda head: self.student(batch, rows, s_cols, head), targets,
                                   self.cached_loss, teacher=lambda head: cached)

    def cached_teacher(self, batch: Mapping[str, torch.Tensor]) -> CachedTargets:
        """The cached teacher at the batch's completion positions, in :meth:`completion_index` order; views
        the cache lacks (read past the first pass) are computed first."""
        from ifdistill.methods.distill.teacher_pass import batch_views
        from ifdistill.methods.distill.teacher_pass_runner import extend_on_demand

        if "teacher_prefix_ids" in batch:
            raise ValueError("a shared-demonstration batch cannot read the teacher cache (method.demos=per_example)")
        views = batch_views(batch)
        if self.teacher_cache.missing(v.key for v in views):
            extend_on_demand(self, views)
        return CachedTargets.cat([self.teacher_cache.get(v.key) for v in views]).to(self.device)

    def cached_loss(self, s_logits: torch.Tensor, targets: torch.Tensor,
                    cached: CachedTargets) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The objective against the cached teacher (:func:`~ifdistill.train.losses.cached_kd_with_stats`)."""
        return cached_kd_with_stats(s_logits, targets, cached.ids, cached.logp, cached.tail,
                                    kd_ratio=self.kd["kd_ratio"], temperature=self.kd["temperature"])

    def teacher_metrics(self, sums: Mapping[str, float]) -> dict[str, float]:
        if self.teacher_cache is None:
            return super().teacher_metrics(sums)
        return {"teacher/acc": ratio(sums, "teacher_correct", "teacher_count"),  # the cache holds the teacher's
                "teacher/topk_mass": ratio(sums, "teacher_mass", "teacher_count"),  # top-k, not its distribution
                "teacher_cache/hits": float(self.teacher_cache.hits),
                "teacher_cache/misses": float(self.teacher_cache.misses)}
