"""The settings both distillation methods share (:mod:`ifdistill.methods.sft.settings`): the objective
``kd_ratio * D(teacher, student) + (1 - kd_ratio) * CE`` on the completion tokens, and which teacher.

:class:`KDSettings` holds the fields and their checks; off-policy distillation's
(:class:`~ifdistill.methods.distill.settings.DistillSettings`) and on-policy distillation's
(:class:`~ifdistill.methods.onpolicy_distill.settings.OnPolicyDistillSettings`) extend it with their own fields,
the teachers they add (:attr:`KDSettings.teachers`), the divergences (:meth:`KDSettings.divergences`) and, where
theirs differ, their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from ifdistill.methods.sft.settings import SFTSettings, out_of_range


@dataclass
class KDSettings(SFTSettings):
    kd_ratio: float = 0.5
    kl: str = "forward"  # forward = KL(teacher||student) | reverse = KL(student||teacher) | jsd
    beta: float = 0.5  # jsd only: weight of the teacher in the mixture (0 < beta < 1)
    temperature: float = 1.0  # both distributions softened by T; the divergence is scaled by T^2
    # frozen_initial (the model before training; LoRA: the adapter disabled, no copy) | self_stopgrad (the live
    # student under no_grad), and the teachers a method adds (teachers)
    teacher: str = "frozen_initial"
    topk: Optional[int] = None  # compare on the teacher's top-k tokens only (both renormalised)

    #: The teachers the method's module builds.
    teachers: ClassVar[tuple[str, ...]] = ("frozen_initial", "self_stopgrad")

    @classmethod
    def divergences(cls) -> tuple[str, ...]:
        """What ``kl`` may name: the divergences the objective computes (:data:`ifdistill.train.losses.DIVERGENCES`,
        which imports torch: asked only when a value is checked)."""
        from ifdistill.train.losses import DIVERGENCES

        return DIVERGENCES

    def problems(self) -> list[str]:
        """The divergence's weight, kind and parameters, and the teacher; ``topk=0`` is refused, not read as
        "off" (``null`` is the full vocabulary)."""
        problems = super().problems() + out_of_range(self, (
            ("kd_ratio", lambda v: 0.0 <= float(v) <= 1.0, "in [0, 1]"),
            ("beta", lambda v: 0.0 < float(v) < 1.0, "in (0, 1) (jsd's weight of the teacher)"),
            ("temperature", lambda v: float(v) > 0.0, "> 0"),
            ("topk", lambda v: v is None or int(v) >= 1, "null (the full vocabulary) or >= 1"),
        ))
        for key, allowed in (("kl", self.divergences()), ("teacher", self.teachers)):
            if getattr(self, key) not in allowed:
                problems.append(f"{key}: must be one of {', '.join(allowed)}, got {getattr(self, key)!r}")
        return problems
