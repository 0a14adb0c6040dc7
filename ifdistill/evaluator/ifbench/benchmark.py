"""IFBench's registration (:mod:`ifdistill.evaluator.benchmark`).

IFBench's reference evaluation judges strict and loose exactly as IFEval's does, so its rows go through
IFEval's plan, scorer and results (:class:`~ifdistill.evaluator.ifeval.benchmark.InstructionBenchmark`);
only the name (the W&B namespace ``ifbench/*`` of an ``evals.ifbench`` section), the display name and the instruction ids of its per-type
panel are its own.
"""

from __future__ import annotations

from ifdistill.evaluator.benchmark import register
from ifdistill.evaluator.ifeval.benchmark import InstructionBenchmark


class IFBench(InstructionBenchmark):
    name = "ifbench"
    display = "IFBench"
    default = False
    page_columns = ()
    packages = (*InstructionBenchmark.packages, "ifdistill.ifbench")  # its instructions' checkers
    local_config = "ifbench_local"
    local_data = "ifbench/IFBench_test_v2.jsonl"
    id_registry = ("ifdistill.ifbench.registry", "IFBENCH_REGISTRY")
    format_prefixes = ("format", "repeat")  # layout and copying; count/ratio/words/sentence/custom: content


register(IFBench())
