"""ifdistill's IFEval scorer: google's 25 instruction checkers, strict and loose, with statistics.

Importing this package is cheap and offline: nltk and langdetect are loaded at first use
(see :mod:`ifdistill.checking.text_analysis`).
"""

from ifdistill.checking.instruction_base import Instruction, InstructionError, InvalidKwargsError
from ifdistill.ifeval.registry import INSTRUCTION_REGISTRY, build_instruction
from ifdistill.ifeval.scoring import (
    SCORER_VERSION,
    InvalidRowError,
    Judgement,
    ScoredRows,
    SkippedRow,
    loose_variants,
    score_response,
    score_rows,
)
from ifdistill.ifeval.stats import aggregate, mcnemar_exact, paired_bootstrap, per_instruction_type

__all__ = [
    "INSTRUCTION_REGISTRY",
    "SCORER_VERSION",
    "Instruction",
    "InstructionError",
    "InvalidKwargsError",
    "InvalidRowError",
    "Judgement",
    "ScoredRows",
    "SkippedRow",
    "aggregate",
    "build_instruction",
    "loose_variants",
    "mcnemar_exact",
    "paired_bootstrap",
    "per_instruction_type",
    "score_response",
    "score_rows",
]
