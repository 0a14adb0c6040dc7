"""The multi-turn benchmark's plan: an instruction benchmark's, and where each conversation's new
instructions start (imported when an evaluation prepares, not when the benchmark registers)."""

from __future__ import annotations

import dataclasses

from ifdistill.evaluator.plan import EvalPlan


@dataclasses.dataclass(kw_only=True)
class MultiTurnPlan(EvalPlan):
    """``carried``: per conversation key, how many of its instructions came from earlier turns (they lead its
    ``instruction_id_list``; the rest are the final turn's); ``skipped``: the keys of rows left without a
    conversation."""

    carried: dict[str, int]
    skipped: list[str]

    @classmethod
    def of(cls, plan: EvalPlan, *, carried: dict[str, int], skipped: list[str]) -> "MultiTurnPlan":
        return cls(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(EvalPlan)}, carried=carried,
                   skipped=skipped)
