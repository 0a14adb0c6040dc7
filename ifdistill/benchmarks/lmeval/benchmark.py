"""lm-eval's registration (:mod:`ifdistill.benchmarks.registry`): lm-evaluation-harness tasks on the evaluator's engine.

Phase 1 and 2 are :mod:`ifdistill.benchmarks.lmeval.run`'s (lm-eval imports only there). Its metrics are
results.json's flat ``<task>/<metric>[/<filter>]`` (:mod:`ifdistill.benchmarks.lmeval.output`); its W&B
samples table shows, per document, what the document's request type produced: a generated ``response``
and what each filter kept, or the ``choices`` with their log-likelihoods, or a rolling log-likelihood;
columns no row of the table has are left out. The W&B view's panels come from the tasks' YAMLs (their
``metric_list`` and ``filter_list``), read through lm-eval's task index.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from ifdistill.benchmarks.base import Benchmark
from ifdistill.benchmarks.registry import register

#: Samples-table columns in order; a column appears when some row of the table holds it.
COLUMNS = ("key", "task", "prompt", "target", "response", "filtered", "choices", "loglikelihoods", "is_greedy",
           "loglikelihood", "metrics")


def _cell(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return "" if value is None else value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


#: The shared decoding settings lm-eval does not take (a task's ``generation_kwargs`` decide them).
TASK_DECODING = ("greedy", "temperature", "top_p", "top_k", "max_new_tokens", "stop")


def ignored_decoding(generation: Any) -> dict[str, Any]:
    """The :data:`TASK_DECODING` settings of ``generation`` that differ from their defaults (the dataclass's)."""
    from ifdistill.evaluator.settings import GenerationSettings

    default = GenerationSettings()
    return {k: getattr(generation, k) for k in TASK_DECODING if getattr(generation, k) != getattr(default, k)}


class LMEval(Benchmark):
    name = "lmeval"
    display = "lm-eval"
    page_columns = (("GSM8K strict", "gsm8k/exact_match/strict-match"), ("MMLU", "mmlu/acc"),
                    ("TruthfulQA mc2", "truthfulqa_mc2/acc"), ("CommonsenseQA", "commonsense_qa/acc"))

    #: What a regex filter keeps when it extracts no answer (lm-eval's ``RegexFilter`` fallback), and the part
    #: of a filter's name that marks the strict one (gsm8k's ``strict-match`` beside ``flexible-extract``):
    #: the format-vs-task analysis (ifdistill.results.format_task) reads the strict filter's parse rate.
    unparsed = "[invalid]"
    strict_filter_marker = "strict"

    #: lm-eval's metrics that are rates in [0, 1] (shown in percent), and those where lower is better.
    rate_metrics = ("acc", "acc_norm", "exact_match", "mc1", "mc2", "f1", "em", "pass@1")
    lower_is_better = ("perplexity", "word_perplexity", "byte_perplexity", "bits_per_byte", "ter")

    def claims(self, metric: str) -> bool:
        return "/" in metric  # <task>/<metric>[/<filter>]

    def is_fraction(self, metric: str) -> bool:
        parts = metric.split("/")  # <task>/<metric>[/<filter>]
        return len(parts) > 1 and parts[1] in self.rate_metrics

    def is_higher_better(self, metric: str) -> bool:
        parts = metric.split("/")
        return not (len(parts) > 1 and parts[1] in self.lower_is_better)

    def check(self, settings: Any) -> None:
        from ifdistill.config import ConfigError

        if not settings.lmeval.tasks:
            raise ConfigError("eval.benchmark=lmeval needs eval.lmeval.tasks (lm-eval task names)")
        if settings.lmeval.fewshot_as_multiturn and not settings.lmeval.apply_chat_template:
            raise ConfigError("eval.lmeval.fewshot_as_multiturn needs eval.lmeval.apply_chat_template=true")
        ignored = ignored_decoding(settings.generation)
        if ignored:
            raise ConfigError(f"eval.benchmark=lmeval decodes as each task's generation_kwargs say: "
                              f"{', '.join(f'eval.generation.{k}={v!r}' for k, v in ignored.items())} would have no "
                              f"effect (leave {'it' if len(ignored) == 1 else 'them'} at the default, or use a task "
                              f"YAML in eval.lmeval.include_path)")

    def prepare(self, settings: Any, run: Any, model_cfg: dict[str, Any], source: Any, *, t0: float) -> Any:
        from ifdistill.benchmarks.lmeval.run import prepare_tasks
        from ifdistill.evaluator.plan import effective_context_len
        from ifdistill.evaluator.prompts import load_tokenizer, stop_token_ids

        tokenizer, template = load_tokenizer(source.tokenizer_dir, settings.generation.chat_template)
        return prepare_tasks(settings, run, model_cfg, source, tokenizer=tokenizer, chat_template=template,
                             context_len=effective_context_len(settings, source), t0=t0,
                             stop_token_ids=stop_token_ids(tokenizer, source.model_dir,
                                                           settings.generation.stop_token_ids))

    def execute(self, plan: Any, backend: Any, *, own: bool, runtime: Optional[dict[str, Any]],
                t0: float) -> dict[str, Any]:
        from ifdistill.benchmarks.lmeval.run import execute_and_publish

        return execute_and_publish(plan, backend, own=own, runtime=runtime, t0=t0)

    def summary(self, results: Mapping[str, Any]) -> list[str]:
        t = results["timings"]
        return [f"  documents {results['counts']['num_documents']}", *super().summary(results)[:-1],
                f"  time: prepare {t['prepare_s']:.1f}s  load {t['load_s']:.1f}s  evaluate {t['evaluate_s']:.1f}s  "
                f"({t['documents_per_s']:.1f} documents/s)"]

    def sample_table(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
        columns = [c for c in COLUMNS if any(c in r for r in rows)]
        return columns, [[_cell(r.get(c)) for c in columns] for r in rows]

    def document_values(self, rows: Sequence[Mapping[str, Any]], metric: str) -> Optional[dict[str, float]]:
        """``<task>/<name>``: the rows of that task, each document's ``metrics[<name>]``; a group (mmlu) has
        rows only under its subtasks, so none (unpaired)."""
        task, _, name = metric.partition("/")
        values = {str(r["key"]): float(r["metrics"][name]) for r in rows
                  if r.get("task") == task and isinstance((r.get("metrics") or {}).get(name), (int, float))}
        return values or None

    def smoke_overrides(self, workdir: Path) -> list[str]:
        """A generative and a multiple-choice task on three local documents each
        (:func:`~ifdistill.benchmarks.lmeval.smoke.write_tasks`)."""
        from ifdistill.benchmarks.lmeval.smoke import write_tasks

        tasks = write_tasks(workdir)
        return ["eval=lmeval", f"eval.lmeval.tasks=[{','.join(tasks)}]", f"eval.lmeval.include_path=[{workdir}]",
                "eval.lmeval.num_fewshot=0", "eval.lmeval.bootstrap_iters=0"]

    def panel_metrics(self, section: Mapping[str, Any]) -> list[str]:
        """``<task>/<metric>[/<filter>]`` of each configured task's ``metric_list`` x ``filter_list`` (a group:
        its ``aggregate_metric_list``), as :func:`~ifdistill.benchmarks.lmeval.output.metric_key` names them."""
        from lm_eval.tasks._yaml_loader import load_yaml

        from ifdistill.benchmarks.lmeval.output import metric_key
        from ifdistill.benchmarks.lmeval.task_index import task_manager

        lm = section.get("lmeval") or {}
        manager = task_manager(tuple(str(p) for p in lm.get("include_path") or ()))
        out: list[str] = []
        for task in lm.get("tasks") or ():
            entry = manager._entry(task)  # the index's record: kind and YAML path (no task is built)
            if entry is None or entry.yaml_path is None:
                continue
            config = load_yaml(entry.yaml_path, resolve_func=False)  # its includes merged
            if entry.kind.name == "GROUP":
                pairs = [(a["metric"], a.get("filter_list", "none")) for a in config.get("aggregate_metric_list") or ()]
            else:
                filters = [f["name"] for f in config.get("filter_list") or ()] or ["none"]
                pairs = [(m["metric"], f) for m in config.get("metric_list") or () for f in filters]
            for metric, filter_name in pairs:
                for f in [filter_name] if isinstance(filter_name, str) else filter_name:
                    out.append(metric_key(task, metric, f))
        return list(dict.fromkeys(out))


register(LMEval())
