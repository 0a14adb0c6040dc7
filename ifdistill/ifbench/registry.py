"""IFBench's 58 constraints, keyed by their benchmark ids.

An explicit tuple, as for IFEval (:mod:`ifdistill.ifeval.registry`), so one file shows every id
and importing it loads nothing heavy. :mod:`ifdistill.ifeval.registry` merges this table into the
lookup that ``ifdistill-score`` and the evaluator use, so a row may hold ids of either benchmark.
"""

from __future__ import annotations

from ifdistill.checking.instruction_base import Instruction
from ifdistill.ifbench.instructions_count import COUNT_INSTRUCTIONS
from ifdistill.ifbench.instructions_custom import CUSTOM_INSTRUCTIONS
from ifdistill.ifbench.instructions_format import FORMAT_INSTRUCTIONS
from ifdistill.ifbench.instructions_words import WORDS_INSTRUCTIONS

_ALL: tuple[type[Instruction], ...] = (
    COUNT_INSTRUCTIONS + WORDS_INSTRUCTIONS + FORMAT_INSTRUCTIONS + CUSTOM_INSTRUCTIONS
)

#: IFBench id (e.g. ``count:word_count_range``) -> checker class.
IFBENCH_REGISTRY: dict[str, type[Instruction]] = {cls.instruction_id: cls for cls in _ALL}
