"""The registration IFEval and IFBench extend (:mod:`ifdistill.benchmarks.registry`): instruction-following
rows scored strict and loose.

Phase 1 is :func:`~ifdistill.evaluator.plan.rows_plan` over ``eval.data`` with the scorer's row check
(every row's checkers are built now: an unknown instruction id or bad kwargs is an input error before
generation) and its version in the hash (:func:`ifdistill.benchmarks.instruction_following.scoring.scorer_version_for`
the rows' ids). Phase 2 generates, cuts and decodes the responses, scores them with
:mod:`ifdistill.benchmarks.instruction_following.scoring` and publishes results.json
(:data:`~ifdistill.benchmarks.instruction_following.schema.RESULTS_SCHEMA`: the four aggregates with standard errors,
per-instruction-type accuracy) and samples.jsonl (one row per prompt).

With k responses per prompt (``eval.generation.samples``, sampled): the four aggregates, the per-type accuracy
and each row's decisions are those of the first response of every prompt -- exactly a single sampled
evaluation with the same seed -- and reliable@k and the mean pass rate over all k join them
(:mod:`ifdistill.benchmarks.instruction_following.reliability`); each row lists its k responses with their decisions
(``responses``) and its own values of the new metrics (``metrics``).

A registration that extends :class:`InstructionBenchmark` states its name, its data and its own id table
(``instructions``, imported from its folder); the scorer finds every such table through the registry
(:func:`ifdistill.benchmarks.instruction_following.lookup.all_instructions`). :func:`check_row` and :func:`scorer_version`
also serve benchmarks that read the same rows and score them otherwise (the judge).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ifdistill.benchmarks.instruction_following.instruction_base import Instruction
from ifdistill.benchmarks.instruction_following.reliability import RELIABILITY_METRICS
from ifdistill.benchmarks.instruction_following.stats import METRICS
from ifdistill.benchmarks.base import Benchmark, short_name

if TYPE_CHECKING:
    from ifdistill.evaluator.plan import EvalPlan

log = logging.getLogger(__name__)
_FLAT_PREFIXES = ("prompt_level_", "inst_level_", "num_")  # aggregates at results.json's top level (older files)


def check_row(example: Any) -> None:
    """Build a row's checkers (of any instruction benchmark); ``ValueError`` for an unknown id or bad kwargs."""
    from ifdistill.benchmarks.instruction_following.scoring import build_instructions

    build_instructions(list(example.instruction_id_list), [dict(k) for k in example.kwargs])


def scorer_version(examples: Sequence[Any]) -> str:
    from ifdistill.benchmarks.instruction_following.scoring import scorer_version_for

    return scorer_version_for(iid for ex in examples for iid in ex.instruction_id_list)


def sample_rows(prompts: Sequence[Any], completions: Sequence[Any], scored: Sequence[dict[str, Any]],
                tokenizer, *, strip_thinking: bool = False) -> list[dict[str, Any]]:
    """One row per prompt, in data order (see :data:`ifdistill.benchmarks.instruction_following.schema.SAMPLE_SCHEMA`).

    ``response`` is the whole decoded response; with ``strip_thinking`` the text IFEval scored (after
    ``</think>``) is ``scored_response`` and ``thinking`` says whether the think block was closed."""
    from ifdistill.evaluator.generation import scored_text

    rows = []
    for p, c, s in zip(prompts, completions, scored, strict=True):
        extra: dict[str, Any] = {}
        if strip_thinking:
            answer, state = scored_text(c.text, True)
            extra = {"scored_response": answer, "thinking": state}
        rows.append({
            "key": p.key,
            "prompt": p.example.prompt,
            "rendered_prompt": tokenizer.decode(list(p.token_ids), skip_special_tokens=False),
            "prompt_num_tokens": len(p.token_ids),
            "demo_uids": list(p.demo_uids),
            "response": c.text,
            "instruction_id_list": list(s["instruction_id_list"]),
            "kwargs": [dict(k) for k in s["kwargs"]],
            "strict_inst": list(s["strict_inst"]),
            "loose_inst": list(s["loose_inst"]),
            "strict_prompt": bool(s["strict_prompt"]),
            "loose_prompt": bool(s["loose_prompt"]),
            "num_generated_tokens": len(c.token_ids),
            "finish_reason": c.finish_reason,
            **extra,
        })
    return rows


def score(plan: EvalPlan, completions: list) -> list[dict[str, Any]]:
    """The scorer's rows (strict / loose per instruction and prompt) of the plan's responses, one per request
    (the k responses of a prompt in a row: :attr:`~ifdistill.evaluator.plan.EvalPlan.requests`)."""
    from ifdistill.benchmarks.instruction_following.scoring import score_rows
    from ifdistill.evaluator.generation import scored_text

    strip = bool(plan.settings.generation.strip_thinking)
    prompts = [p for p in plan.prompts for _ in range(plan.samples)]
    rows = [{"key": p.key, "prompt": p.example.prompt, "instruction_id_list": list(p.example.instruction_id_list),
             "kwargs": [dict(k) for k in p.example.kwargs], "response": scored_text(c.text, strip)[0]}
            for p, c in zip(prompts, completions, strict=True)]
    return score_rows(rows, source=plan.settings.data.name).rows


def with_samples(samples: list[dict[str, Any]], plan: EvalPlan, completions: Sequence[Any],
                 scored: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """reliable@k and the mean pass rate of the k responses per prompt; each samples.jsonl row gets its
    responses (``responses``: text, decisions, seed) and its own values of those metrics (``metrics``)."""
    from ifdistill.benchmarks.instruction_following.reliability import prompt_values, reliability

    k = plan.samples
    groups = [list(scored[i * k:(i + 1) * k]) for i in range(len(samples))]
    for i, (row, group) in enumerate(zip(samples, groups, strict=True)):
        row["responses"] = [{"response": c.text, "seed": r.seed, "strict_inst": list(s["strict_inst"]),
                           "loose_inst": list(s["loose_inst"]), "strict_prompt": bool(s["strict_prompt"]),
                           "loose_prompt": bool(s["loose_prompt"]), "num_generated_tokens": len(c.token_ids),
                           "finish_reason": c.finish_reason}
                          for c, r, s in zip(completions[i * k:(i + 1) * k], plan.requests[i * k:(i + 1) * k], group)]
        row["metrics"] = {**row.get("metrics", {}), **prompt_values(group)}
    return reliability(groups)


class InstructionBenchmark(Benchmark):
    """Rows with verifiable instructions, judged strict and loose (IFEval's protocol). Not registered itself:
    a subclass states its name, data and ``instructions``."""

    required_metrics = METRICS
    sample_columns = ("key", "prompt", "response", "instruction_id_list", "strict_prompt", "loose_prompt",
                      "finish_reason")
    #: Its config (``conf/eval/<name>.yaml``) on the shared offline copy of its rows.
    local_config = ""
    type_value = "strict_acc"
    prompt_decisions = True
    fractions = True
    type_label = "instruction type"
    #: Its instruction ids -> their checker classes (its folder's table); the scorer knows the ids of every
    #: registration's table (:func:`ifdistill.benchmarks.instruction_following.lookup.all_instructions`).
    instructions: Mapping[str, type[Instruction]] = {}
    #: Id prefixes (before ``:``) of its instructions about the output's *form* (layout, case, punctuation, ...);
    #: every other instruction is about its *content*. Read by the format-vs-task analysis
    #: (ifdistill.results.format_task).
    format_prefixes: tuple[str, ...] = ()

    #: Every metric its results.json may hold (the four IFEval aggregates, then what k responses per prompt add;
    #: a subclass's own scores after them), the order of tables and panels.
    metric_names: tuple[str, ...] = (*METRICS, *RELIABILITY_METRICS)
    samples_per_prompt = True

    def own_scores(self, plan: EvalPlan, samples: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Metrics of its own beside the aggregates (with standard errors) and counts of its own, from the
        samples.jsonl rows (each prompt's first response), which it may extend (a row's own values of its
        metrics go in the row's ``metrics``)."""
        return {}, {}

    def checker_version(self) -> str:
        """The version its checkers add to the scorer's where a row holds one of its ids
        (:func:`~ifdistill.benchmarks.instruction_following.scoring.scorer_version_for`); empty: none of their own."""
        return ""

    def clear_caches(self) -> None:
        """Drop its checkers' own memos (:func:`~ifdistill.benchmarks.instruction_following.scoring.clear_caches`)."""

    def prepare(self, settings: Any, run: Any, model_cfg: dict[str, Any], source: Any, *, t0: float) -> EvalPlan:
        from ifdistill.evaluator.plan import rows_plan

        return rows_plan(settings, run, model_cfg, source, t0=t0, check_row=check_row, scorer_version=scorer_version)

    def execute(self, plan: EvalPlan, backend: Any, *, own: bool, runtime: Optional[dict[str, Any]],
                t0: float) -> dict[str, Any]:
        from ifdistill.benchmarks.instruction_following.stats import aggregate, per_instruction_type
        from ifdistill.evaluator.generation import finalize, scored_text
        from ifdistill.evaluator.plan import generate_responses
        from ifdistill.evaluator.results import package_versions, publish

        t1 = time.perf_counter()
        raw, backend_info, generate_s = generate_responses(plan, backend, own=own)
        t_scoring = time.perf_counter()  # after the backend's shutdown, which is no one's time
        completions = [finalize(ids, r, plan.sampling, plan.tokenizer) for ids, r in zip(raw, plan.requests)]
        scored = score(plan, completions)
        k = plan.samples
        first, first_scored = completions[::k], scored[::k]  # each prompt's first response: a single evaluation's
        metrics, per_type = aggregate(first_scored), per_instruction_type(first_scored)
        strip = bool(plan.settings.generation.strip_thinking)
        samples = sample_rows(plan.prompts, first, first_scored, plan.tokenizer, strip_thinking=strip)
        if k > 1:
            metrics.update(with_samples(samples, plan, completions, scored))
        own_metrics, own_counts = self.own_scores(plan, samples)
        metrics.update(own_metrics)
        t3 = time.perf_counter()
        tokens = sum(len(c.token_ids) for c in completions)
        counts: dict[str, Any] = {
            "num_prompts": len(samples), "num_instructions": metrics["num_instructions"], "generated_tokens": tokens,
            "finish_reasons": dict(sorted(collections.Counter(c.finish_reason for c in completions).items()))}
        if k > 1:
            counts["samples_per_prompt"] = k
        counts.update(own_counts)
        if strip:  # how many answers came after a closed think block, had none, or never closed it
            counts["thinking"] = dict(sorted(collections.Counter(scored_text(c.text, True)[1]
                                                                 for c in completions).items()))
        results = plan.results_record(
            scores={"metrics": metrics, "per_instruction_type": per_type, "counts": counts},
            data={"eval": plan.data.identity, "fewshot_pool": plan.pool.identity if plan.pool else None},
            backend=backend_info, runtime=runtime, versions=package_versions(),
            timings={"prepare_s": round(plan.prepare_s, 3), "load_s": round(t1 - t0, 3),
                     "generate_s": round(generate_s, 3), "score_s": round(t3 - t_scoring, 3),
                     "total_s": round(plan.prepare_s + time.perf_counter() - t0, 3),
                     "generated_tokens_per_s": round(tokens / max(generate_s, 1e-9), 1)})
        publish(plan.run.output_dir, results, samples, overwrite=plan.run.overwrite)
        log.info("eval %s -> %s: prompt strict %.4f, inst strict %.4f (%d prompts)", plan.eval_config_hash,
                 plan.run.output_dir, metrics["prompt_level_strict_acc"], metrics["inst_level_strict_acc"],
                 len(samples))
        return results

    def metric_values(self, results: Mapping[str, Any]) -> dict[str, float]:
        """Its metrics (:attr:`metric_names`) and their standard errors (nested under ``metrics`` or, in older
        files, the four aggregates at the top level)."""
        nested = results.get("metrics")
        found = (nested if isinstance(nested, Mapping) and any(m in nested for m in self.metric_names)
                 else {k: v for k, v in results.items() if k.startswith(_FLAT_PREFIXES)})
        return {key: float(found[key]) for name in self.metric_names for key in (name, f"{name}_stderr")
                if isinstance(found.get(key), (int, float)) and not isinstance(found.get(key), bool)}

    def headline_metrics(self, results: Mapping[str, Any]) -> list[str]:
        """The four aggregates, then those of its other metrics the results hold (reliable@k with k responses)."""
        values = self.metric_values(results)
        return [*METRICS, *(m for m in self.metric_names if m not in METRICS and m in values)]

    def claims(self, metric: str) -> bool:
        return metric.removesuffix("_stderr") in self.metric_names

    def is_prompt_decision(self, metric: str) -> bool:
        return metric.removesuffix("_stderr") in METRICS

    def summary(self, results: Mapping[str, Any]) -> list[str]:
        m, t = results["metrics"], results["timings"]
        lines = [f"  prompts {m['num_prompts']}  prompt strict {m['prompt_level_strict_acc']:.4f}  inst strict "
                 f"{m['inst_level_strict_acc']:.4f}  prompt loose {m['prompt_level_loose_acc']:.4f}  inst loose "
                 f"{m['inst_level_loose_acc']:.4f}"]
        values = self.metric_values(results)
        own = [n for n in self.headline_metrics(results) if n not in METRICS]
        if own:
            k = (results.get("counts") or {}).get("samples_per_prompt")
            lines.append("  " + (f"k={k}  " if k else "") + "  ".join(
                f"{short_name(n)} {values[n]:.4f}" + (f" ± {values[n + '_stderr']:.4f}" if n + "_stderr" in values else "")
                for n in own))
        lines.append(f"  time: prepare {t['prepare_s']:.1f}s  load {t['load_s']:.1f}s  generate {t['generate_s']:.1f}s  "
                     f"score {t['score_s']:.1f}s  ({t['generated_tokens_per_s']:.0f} generated tokens/s)")
        return lines

    def per_type(self, results: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        return {inst: {k: float(v) for k, v in vals.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                for inst, vals in (results.get("per_instruction_type") or {}).items()}

    def score_responses(self, rows: Sequence[Mapping[str, Any]], responses: Sequence[str]
                        ) -> tuple[list[dict[str, Any]], dict[str, float]]:
        from ifdistill.benchmarks.instruction_following.scoring import score_response
        from ifdistill.benchmarks.instruction_following.stats import aggregate

        scored = [{**score_response(text, list(r["instruction_id_list"]), list(r["kwargs"])).as_fields(),
                   "instruction_id_list": list(r["instruction_id_list"])} for r, text in zip(rows, responses, strict=True)]
        totals = aggregate(scored)
        return scored, {m: totals[m] for m in METRICS}

    def sample_row(self, row: Mapping[str, Any]) -> list[Any]:
        ids = row.get("instruction_id_list") or []
        return [str(row.get("key")), row.get("prompt", ""), row.get("scored_response", row.get("response", "")),
                ", ".join(ids), bool(row.get("strict_prompt")), bool(row.get("loose_prompt")),
                str(row.get("finish_reason", ""))]

    def smoke_overrides(self, workdir: Path) -> list[str]:
        return [f"eval={self.local_config}", "eval.data.max_examples=3", "eval.generation.max_new_tokens=4"]

    def panel_metrics(self, section: Mapping[str, Any]) -> list[str]:
        """The four aggregates; with k responses per prompt (``generation.samples``), reliable@k and the mean
        pass rate too."""
        k = (section.get("generation") or {}).get("samples") or 1
        return [*METRICS, *(RELIABILITY_METRICS if k > 1 else ())]

    def type_ids(self, section: Mapping[str, Any]) -> list[str]:
        return sorted(self.instructions)
