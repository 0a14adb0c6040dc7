"""Off-policy ICL distillation's hooks (:mod:`ifdistill.train.method`): the shared distillation hooks
(:class:`~ifdistill.methods.knowledge_distillation.hooks.KDHooks`: the teacher's view of ``k``
demonstrations) plus shared demonstrations per micro-batch, the rule a teacher cache puts on them, and the
teacher pass run alone. Light to import (:mod:`ifdistill.methods.sft.hooks`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.methods.knowledge_distillation.hooks import KDHooks


class DistillHooks(KDHooks):
    """The hooks of :class:`~ifdistill.methods.distill.module.ICLDistillModule`."""

    settings_class = DistillSettings

    @classmethod
    def train_collator(cls, default: Callable, *, data: Any, tokenizer: Any, built: Any) -> Callable:
        """``demos=shared``: one demonstration set per micro-batch, chosen from the new training data
        (:mod:`ifdistill.methods.distill.shared_demos`); per-example views are the data layer's batches."""
        from ifdistill.methods.distill.shared_demos import SharedDemoCollator

        if data.icl.k == 0 or data.icl.demos != "shared":
            return default
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return SharedDemoCollator(tokenizer, built.examples, built.demo_pool, data.icl, pad_token_id=pad)

    @classmethod
    def config_problems(cls, method: Mapping[str, Any], tree: Mapping[str, Any]) -> list[str]:
        """A teacher cache with demonstrations shared per micro-batch: a teacher view would depend on its
        batch, so no cached view would serve another run (the settings' own values are the settings class's)."""
        source = method.get("teacher_source", DistillSettings.teacher_source)
        if source == "cache" and int(method.get("k") or 0) > 0 and method.get("demos") == "shared":
            return ["method.teacher_source=cache needs method.demos=per_example: shared demonstrations make a "
                    "teacher view depend on its batch, so no cached view would serve another run"]
        return []

    @classmethod
    def sections(cls) -> tuple[str, ...]:
        return ("teacher_pass",)  # +teacher_pass.{only,shard,num_shards}: teacher_pass_runner.teacher_pass_only

    @classmethod
    def works_alone(cls, config: Any) -> bool:
        return bool((config.section("teacher_pass") or {}).get("only"))

    @classmethod
    def run_alone(cls, config: Any, build: Any) -> dict[str, Any]:
        """``+teacher_pass.only=true``: the teacher pass alone, no run directory, no training."""
        from ifdistill.methods.distill.teacher_pass_runner import teacher_pass_only

        dm, module, gpu = build()
        return teacher_pass_only(config.section("teacher_pass"), dm, module, gpu=gpu)


HOOKS = DistillHooks
