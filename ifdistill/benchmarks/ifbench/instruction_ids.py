"""IFBench's 58 constraints, keyed by their benchmark ids.

An explicit tuple, as IFEval's table is, so one file shows every id and importing it loads nothing
heavy. IFBench's registration (:mod:`ifdistill.benchmarks.ifbench.benchmark`) holds this table; the
shared scorer finds it there (:func:`ifdistill.benchmarks.instruction_following.lookup.all_instructions`), so
``ifdistill-score`` and the evaluator score rows of either benchmark.
"""

from __future__ import annotations

from ifdistill.benchmarks.instruction_following.instruction_base import Instruction
from ifdistill.benchmarks.ifbench.instructions_count import COUNT_INSTRUCTIONS
from ifdistill.benchmarks.ifbench.instructions_custom import CUSTOM_INSTRUCTIONS
from ifdistill.benchmarks.ifbench.instructions_format import FORMAT_INSTRUCTIONS
from ifdistill.benchmarks.ifbench.instructions_words import WORDS_INSTRUCTIONS

_ALL: tuple[type[Instruction], ...] = (
    COUNT_INSTRUCTIONS + WORDS_INSTRUCTIONS + FORMAT_INSTRUCTIONS + CUSTOM_INSTRUCTIONS
)

#: IFBench id (e.g. ``count:word_count_range``) -> checker class.
IFBENCH_REGISTRY: dict[str, type[Instruction]] = {cls.instruction_id: cls for cls in _ALL}
