"""The instruction-checking base IFEval and IFBench share, and the scorer that judges both.

- :mod:`.instruction_base`: the checker base class with its kwargs validation; :mod:`.text_analysis`
  (with :mod:`.langdetect_fast`): sentences, words, capital words, language.
- :mod:`.lookup`: the checker of an instruction id, from the tables of every instruction benchmark the
  registry knows; :mod:`.scoring`: strict and loose decisions, whole rows with validation;
  :mod:`.stats`: aggregates with standard errors (``ifdistill-score``, :mod:`ifdistill.cli.score`, scores a
  file of responses with them).
- :mod:`.instruction_benchmark`: the registration both benchmarks extend (the plan over ``eval.data``'s
  rows, scoring, results.json) and :mod:`.schema`, its results.json and samples.jsonl.

It sits below both benchmarks' folders (:mod:`ifdistill.benchmarks.ifeval`, :mod:`ifdistill.benchmarks.ifbench`),
which build their checkers on it and hold their own id tables; it imports neither. Importing it is cheap
and offline: nltk and langdetect load at first use.
"""

from ifdistill.benchmarks.instruction_following.instruction_base import Instruction, InstructionError, InvalidKwargsError
from ifdistill.benchmarks.instruction_following.lookup import all_instructions, build_instruction
from ifdistill.benchmarks.instruction_following.scoring import (
    SCORER_VERSION,
    InvalidRowError,
    Judgement,
    ScoredRows,
    SkippedRow,
    loose_variants,
    score_response,
    score_rows,
)
from ifdistill.benchmarks.instruction_following.stats import aggregate, mcnemar_exact, paired_bootstrap, per_instruction_type

__all__ = [
    "SCORER_VERSION",
    "Instruction",
    "InstructionError",
    "InvalidKwargsError",
    "InvalidRowError",
    "Judgement",
    "ScoredRows",
    "SkippedRow",
    "aggregate",
    "all_instructions",
    "build_instruction",
    "loose_variants",
    "mcnemar_exact",
    "paired_bootstrap",
    "per_instruction_type",
    "score_response",
    "score_rows",
]
