"""The multi-turn benchmark's registration (:mod:`ifdistill.benchmarks.registry`): does a model follow a
constraint that arrives in a later turn, and does it keep the earlier ones?

Each item is a conversation (:mod:`~ifdistill.benchmarks.ifeval_multiturn.conversations`): an IFEval prompt,
a fixed assistant answer to it, and a user turn adding one new constraint; the model writes the final reply
only, after the whole conversation rendered by its chat template. The reply is scored with IFEval's checkers
on every instruction of the conversation (the plan, scorer and results of
:class:`~ifdistill.benchmarks.instruction_following.instruction_benchmark.InstructionBenchmark`), and two scores of its own
are made of those decisions, strict and loose:

- **isolation** (``isolation_<mode>_acc``): the reply follows the final turn's constraint(s);
- **persistence** (``persistence_<mode>_acc``): it also still follows turn 1's, on the conversations that
  have them (the generated ones; none in the published IFBench layout, whose earlier turns carry no ids).
  The new constraint never conflicts with turn 1's (IFEval's own conflict table,
  :mod:`~ifdistill.benchmarks.ifeval_multiturn.conflicts`).

Each is a share of conversations with the binomial standard error the prompt-level accuracies carry
(:func:`ifdistill.statistics.binomial_stderr`); every samples.jsonl row holds its own 0/1 values (``metrics``),
so differences between two evaluations pair by conversation. The IFEval aggregates beside them are over all
of a conversation's instructions (their prompt level equals persistence on generated conversations).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ifdistill.benchmarks.instruction_following.instruction_benchmark import InstructionBenchmark, check_row, scorer_version
from ifdistill.benchmarks.instruction_following.reliability import RELIABILITY_METRICS
from ifdistill.benchmarks.instruction_following.stats import METRICS
from ifdistill.benchmarks.ifeval_multiturn import conflicts
from ifdistill.benchmarks.registry import register
from ifdistill.statistics import binomial_stderr

if TYPE_CHECKING:
    from ifdistill.benchmarks.ifeval_multiturn.plan import MultiTurnPlan

MODES = ("strict", "loose")
SCORES = tuple(f"{score}_{mode}_acc" for mode in MODES for score in ("isolation", "persistence"))


def conversation_scores(carried: int, strict_inst: list[bool], loose_inst: list[bool]) -> dict[str, float]:
    """One reply's isolation (all of the final turn's instructions, those after the ``carried`` ones,
    followed) and, where earlier turns carried instructions, persistence (all of them followed)."""
    out = {}
    for mode, inst in (("strict", strict_inst), ("loose", loose_inst)):
        out[f"isolation_{mode}_acc"] = float(all(inst[carried:]))
        if carried:
            out[f"persistence_{mode}_acc"] = float(all(inst))
    return {k: out[k] for k in SCORES if k in out}


class IFEvalMultiTurn(InstructionBenchmark):
    name = "ifeval_multiturn"
    display = "IFEval multi-turn"
    local_config = "ifeval_multiturn"
    local_data = "ifeval/input_data.jsonl"  # made into conversations with GPT-4's published responses
    metric_names = (*SCORES, *METRICS, *RELIABILITY_METRICS)
    format_prefixes = ("detectable_format", "change_case", "punctuation", "startend", "combination")
    page_columns = (("multi-turn isolation", "isolation_strict_acc"), ("multi-turn persistence", "persistence_strict_acc"))

    def check(self, settings: Any) -> None:
        from ifdistill.benchmarks.ifeval_multiturn.wording import WORDINGS
        from ifdistill.config import ConfigError

        unknown = [i for i in settings.multiturn.instructions if i not in WORDINGS]
        if unknown:
            raise ConfigError(f"eval.multiturn.instructions: no wording for {unknown}; known: {sorted(WORDINGS)}")

    def prepare(self, settings: Any, run: Any, model_cfg: dict[str, Any], source: Any, *, t0: float) -> MultiTurnPlan:
        from ifdistill.benchmarks.ifeval_multiturn import conversations
        from ifdistill.benchmarks.ifeval_multiturn.plan import MultiTurnPlan
        from ifdistill.evaluator.dataset import LoadedRows, load_eval_rows, rows_sha256
        from ifdistill.evaluator.errors import EvaluatorError
        from ifdistill.evaluator.plan import rows_plan
        from ifdistill.paths import shared_data_dir

        rows = load_eval_rows(settings.data)
        m = settings.multiturn
        try:
            made = conversations.build(rows.examples, seed=m.seed, instructions=m.instructions,
                                       responses=Path(m.responses or shared_data_dir() / conversations.GPT4_RESPONSES))
        except conversations.ConversationError as err:
            raise EvaluatorError(str(err)) from None
        if not made.examples:
            raise EvaluatorError(f"no conversation could be made from evaluation data {settings.data.name!r}: every "
                                 "row's instructions conflict with every new constraint allowed")
        digest = rows_sha256(made.examples)
        data = LoadedRows(made.examples, digest, {**rows.identity, "rows_sha256": digest, "num_rows": len(made.examples),
                                                  "source_rows_sha256": rows.rows_sha256, "responses": made.responses,
                                                  "skipped_keys": made.skipped})
        plan = rows_plan(settings, run, model_cfg, source, t0=t0, check_row=check_row, scorer_version=scorer_version,
                         data=data)
        plan.fingerprint["multiturn"] = {"generator_version": conversations.GENERATOR_VERSION}
        return MultiTurnPlan.of(plan, carried=made.carried, skipped=made.skipped)

    def own_scores(self, plan: MultiTurnPlan, samples: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Isolation and persistence of each reply (its row's ``metrics``), then their shares with standard
        errors; the counts of conversations with a persistence score and of rows left without a conversation."""
        per_row = []
        for row in samples:
            carried = plan.carried[row["key"]]
            scores = conversation_scores(carried, row["strict_inst"], row["loose_inst"])
            row["new_instruction_ids"] = row["instruction_id_list"][carried:]
            row["metrics"] = {**row.get("metrics", {}), **scores}
            per_row.append(scores)
        out: dict[str, Any] = {}
        for name in SCORES:
            values = [s[name] for s in per_row if name in s]
            if values:
                out[name] = sum(values) / len(values)
                out[f"{name}_stderr"] = binomial_stderr(int(sum(values)), len(values))
        counts = {"persistence_conversations": sum("persistence_strict_acc" in s for s in per_row),
                  "skipped_rows": len(plan.skipped)}
        return out, counts

    def headline_metrics(self, results: Mapping[str, Any]) -> list[str]:
        """Isolation and persistence (those the results hold), then reliable@k with k responses per prompt."""
        values = self.metric_values(results)
        return [m for m in (*SCORES, *RELIABILITY_METRICS) if m in values]

    def panel_metrics(self, section: Mapping[str, Any]) -> list[str]:
        return [*SCORES, *super().panel_metrics(section)]

    def type_ids(self, section: Mapping[str, Any]) -> list[str]:
        """IFEval's ids: turn 1's and the new constraint's are all IFEval instructions."""
        return sorted(conflicts.INSTRUCTIONS)

    def smoke_overrides(self, workdir: Path) -> list[str]:
        return [f"eval={self.local_config}", "eval.data.max_examples=3", "eval.generation.max_new_tokens=4"]


register(IFEvalMultiTurn())
