"""IFEval's registration (:mod:`ifdistill.benchmarks.registry`): google's 541 prompts with verifiable
instructions, judged strict and loose, the default benchmark.

The plan, the scoring and the results are the instruction-checking base's
(:class:`~ifdistill.benchmarks.instruction_following.instruction_benchmark.InstructionBenchmark`); its own are the name
(the W&B namespace ``ifeval/*``), its data, the results page's default columns, its checkers
(:data:`~ifdistill.benchmarks.ifeval.instruction_ids.INSTRUCTION_REGISTRY`) and which of them are about form.
"""

from __future__ import annotations

from ifdistill.benchmarks.instruction_following.instruction_benchmark import InstructionBenchmark
from ifdistill.benchmarks.ifeval.instruction_ids import INSTRUCTION_REGISTRY
from ifdistill.benchmarks.registry import register


class IFEval(InstructionBenchmark):
    name = "ifeval"
    display = "IFEval"
    default = True
    local_config = "ifeval_local"
    local_data = "ifeval/input_data.jsonl"  # google's 541 prompts
    page_columns = (("IFEval prompt strict", "prompt_level_strict_acc"), ("IFEval inst strict", "inst_level_strict_acc"))
    instructions = INSTRUCTION_REGISTRY
    # form: layout, case, punctuation, start/end, combination; content: keywords, language, length, placeholders
    format_prefixes = ("detectable_format", "change_case", "punctuation", "startend", "combination")


register(IFEval())
