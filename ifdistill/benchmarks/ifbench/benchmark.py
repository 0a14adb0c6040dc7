"""IFBench's registration (:mod:`ifdistill.benchmarks.registry`).

IFBench's reference evaluation judges strict and loose exactly as IFEval's does, so its rows go through the
instruction-checking base's plan, scorer and results
(:class:`~ifdistill.benchmarks.instruction_following.instruction_benchmark.InstructionBenchmark`); its own are the name
(the W&B namespace ``ifbench/*`` of an ``evals.ifbench`` section), the display name, its data, its checkers
(:data:`~ifdistill.benchmarks.ifbench.instruction_ids.IFBENCH_REGISTRY`, whose ids its per-type panel shows) and their
version in the config hash.
"""

from __future__ import annotations

from ifdistill.benchmarks.instruction_following.instruction_benchmark import InstructionBenchmark
from ifdistill.benchmarks.ifbench import scorer_version, text
from ifdistill.benchmarks.ifbench.instruction_ids import IFBENCH_REGISTRY
from ifdistill.benchmarks.registry import register


class IFBench(InstructionBenchmark):
    name = "ifbench"
    display = "IFBench"
    local_config = "ifbench_local"
    local_data = "ifbench/IFBench_test_v2.jsonl"
    instructions = IFBENCH_REGISTRY
    format_prefixes = ("format", "repeat")  # layout and copying; count/ratio/words/sentence/custom: content
    # the out-of-distribution columns of the results page, beside IFEval's, wherever a row has them
    page_columns = (("IFBench prompt strict", "prompt_level_strict_acc"),
                    ("IFBench inst strict", "inst_level_strict_acc"))

    def checker_version(self) -> str:
        return scorer_version()

    def clear_caches(self) -> None:
        text.clear_caches()


register(IFBench())
