"""The hooks both distillation methods share (:mod:`ifdistill.train.method`): the teacher's view is the
data layer's ``k`` demonstrations (``demos``: per example or shared per micro-batch), and with none the
student's own view. Light to import (:mod:`ifdistill.methods.sft.hooks`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from ifdistill.methods.knowledge_distillation.settings import KDSettings
from ifdistill.methods.sft.hooks import SFTHooks


class KDHooks(SFTHooks):
    """The hooks of :class:`~ifdistill.methods.knowledge_distillation.module.KDModule`."""

    settings_class = KDSettings

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
