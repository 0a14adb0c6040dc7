"""Off-policy ICL distillation's hooks (:mod:`ifdistill.train.method`): what the data layer attaches
(the teacher's view: ``k`` demonstrations, per example or shared per micro-batch), its batches, the
teacher-cache check and the teacher pass run alone. Light to import (:mod:`ifdistill.methods.sft.hooks`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Optional

from ifdistill.methods.distill.settings import DistillSettings
from ifdistill.methods.sft.hooks import SFTHooks


class DistillHooks(SFTHooks):
    """The hooks of :class:`~ifdistill.methods.distill.module.ICLDistillModule`."""

    settings_class = DistillSettings

    @classmethod
    def data_keys(cls) -> tuple[str, ...]:
        return ("k", "demos")

    @classmethod
    def teacher_views(cls, method: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
        return {"k": method["k"], "demos": method["demos"]}

    @classmethod
    def prepare_items(cls, data: Any, built: Any) -> None:
        """With no demonstration (``k = 0``, none added per example) the teacher view *is* the student
        view: each item gets it here, so every distillation batch has the same layout."""
        from ifdistill.data.icl import identity_teacher_view

        if not data.per_example_demos and data.icl.k == 0:
            for item in built.train.items:
                identity_teacher_view(item)

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
        """The values the module would refuse (:func:`~ifdistill.methods.distill.settings.setting_problems`:
        a kind, a range, a teacher cache it cannot share), before a run directory exists."""
        from ifdistill.methods.distill.settings import setting_problems
        from ifdistill.train.losses import DIVERGENCES  # the objective's kinds (preflight imports the module anyway)

        return setting_problems(method, divergences=DIVERGENCES)

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
