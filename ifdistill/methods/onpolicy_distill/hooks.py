"""On-policy ICL distillation's hooks (:mod:`ifdistill.train.method`): the shared distillation hooks
(:class:`~ifdistill.methods.knowledge_distillation.hooks.KDHooks`) with the teacher's view rebuilt around each
sample (per-example demonstrations, optionally the example itself), and the rules its settings put on the
other sections. Light to import (:mod:`ifdistill.methods.sft.hooks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ifdistill.data.records import Example
from ifdistill.methods.knowledge_distillation.hooks import KDHooks
from ifdistill.methods.onpolicy_distill.settings import OnPolicyDistillSettings


def own_demo(example: Example) -> list[Example]:
    """``own_demo=true`` (self-distillation fine-tuning's teacher): the example itself, gold answer
    included, is the teacher's last demonstration, after the ``k`` drawn ones."""
    return [example]


class OnPolicyDistillHooks(KDHooks):
    """The hooks of :class:`~ifdistill.methods.onpolicy_distill.module.OnPolicyDistillModule`."""

    settings_class = OnPolicyDistillSettings

    @classmethod
    def data_keys(cls) -> tuple[str, ...]:
        return ("k", "demos", "own_demo")

    @classmethod
    def teacher_views(cls, method: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
        return {"k": method["k"], "demos": method["demos"],
                "extra_demos": own_demo if method.get("own_demo") else None}

    @classmethod
    def config_problems(cls, method: Mapping[str, Any], tree: Mapping[str, Any]) -> list[str]:
        """The rules across sections: a teacher cache (off-policy distillation's), shared demonstrations,
        DeepSpeed, several devices with a colocated vLLM engine (the section's own values are the settings
        class's)."""
        from ifdistill.config import lookup
        from ifdistill.train.strategy_settings import strategy_name

        problems = []
        if method.get("teacher_source") not in (None, "online"):  # not a field: also refused as an unknown key
            problems.append("method=onpolicy_distill: teacher_source must be online (a sample is new every step, "
                            "no cached view can serve it)")
        views = cls.teacher_views(method)  # the section's k, demos and own_demo
        if (int(views["k"]) > 0 or views["extra_demos"] is not None) and views["demos"] != "per_example":
            problems.append("method=onpolicy_distill needs method.demos=per_example (the teacher's view is rebuilt "
                            "around each sample)")
        if "deepspeed" in strategy_name(tree).lower():
            problems.append("method=onpolicy_distill normalises gradients after sampling, from param.grad, which "
                            "DeepSpeed partitions: use ddp, fsdp or a single device")
        devices = lookup(tree, "trainer.devices", 1)
        if method.get("engine", OnPolicyDistillSettings.engine) == "vllm" and str(devices) not in ("1", "auto"):
            problems.append(f"method.engine=vllm runs one colocated engine per process on its first device: it "
                            f"needs trainer.devices=1 (got {devices}); use engine=hf with several devices")
        return problems


HOOKS = OnPolicyDistillHooks
