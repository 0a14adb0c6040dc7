"""results.json and samples.jsonl of an lm-eval evaluation, in the evaluator's one output format.

Both are published by :func:`ifdistill.evaluator.results.publish` (atomic, results.json last) and read
by :mod:`ifdistill.evaluator.output`; the differences from IFEval are the metrics and the rows:

- ``metrics``: ``{"<task>/<metric>[/<filter>]": value, "...​_stderr": standard error}`` for every task
  and group lm-eval reports (the filter is left out when it is lm-eval's ``none``): e.g.
  ``gsm8k/exact_match/strict-match`` and ``commonsense_qa/acc``; W&B logs them as ``lmeval/<key>``.
  ``tasks`` holds each task's lm-eval record (version, n-shot, higher_is_better, documents).
- samples.jsonl: one row per document, in task then document order: ``key`` (``<task>/<doc_id>``), the
  rendered ``prompt``, ``target``, then by request type ``response`` and ``filtered`` (the text each
  filter kept), or ``choices`` with their ``loglikelihoods`` and ``is_greedy``, or the rolling
  ``loglikelihood``; ``metrics`` holds the document's value of every metric (per filter), so paired
  tests work per document. Deterministic: no timings or paths.
"""

from __future__ import annotations

from typing import Any

METRIC_SEP = "/"


def metric_key(task: str, metric: str, filter_name: str) -> str:
    return METRIC_SEP.join([task, metric] if filter_name == "none" else [task, metric, filter_name])


def metrics_of(res: dict[str, Any]) -> dict[str, Any]:
    """Flat ``{<task>/<metric>[/<filter>]: value, ..._stderr: se}`` of lm-eval's ``results`` and ``groups``."""
    out: dict[str, Any] = {}
    for section in ("results", "groups"):
        for task, values in (res.get(section) or {}).items():
            for key, value in values.items():
                metric, sep, filter_name = key.partition(",")
                if not sep or metric.endswith("_stderr") or not isinstance(value, (int, float)):
                    continue
                name = metric_key(task, metric, filter_name)
                out[name] = value
                se = values.get(f"{metric}_stderr,{filter_name}")
                out[f"{name}_stderr"] = se if isinstance(se, (int, float)) else None
    return out


def task_records(res: dict[str, Any]) -> dict[str, Any]:
    """Per task: lm-eval's version, shots, which metrics are better high, and how many documents."""
    n = res.get("n-samples") or {}
    return {task: {"version": (res.get("versions") or {}).get(task), "n_shot": (res.get("n-shot") or {}).get(task),
                   "higher_is_better": (res.get("higher_is_better") or {}).get(task),
                   "documents": (n.get(task) or {}).get("effective")}
            for task in res.get("results") or {}}


def sample_rows(res: dict[str, Any], task_names: list[str]) -> list[dict[str, Any]]:
    """One row per document (module docstring) from lm-eval's logged samples (one per document and filter)."""
    rows: list[dict[str, Any]] = []
    for task in task_names:
        by_doc: dict[int, dict[str, Any]] = {}
        for s in (res.get("samples") or {}).get(task, []):
            doc_id = int(s["doc_id"])
            row = by_doc.get(doc_id)
            if row is None:
                row = by_doc[doc_id] = _row(task, s)
            for metric in s["metrics"]:
                row["metrics"][metric_key("", metric, s["filter"]).lstrip(METRIC_SEP)] = s[metric]
            if "response" in row:
                row["filtered"][s["filter"]] = s["filtered_resps"][0]
        rows.extend(by_doc[i] for i in sorted(by_doc))
    return rows


def _row(task: str, s: dict[str, Any]) -> dict[str, Any]:
    args, resps = s["arguments"], s["resps"]
    row: dict[str, Any] = {"key": f"{task}/{s['doc_id']}", "task": task, "doc_id": int(s["doc_id"]),
                           "doc_hash": s["doc_hash"], "prompt": args[0][0], "target": s["target"]}
    if len(args[0]) > 1 and isinstance(args[0][1], dict):  # generate_until: (context, gen_kwargs)
        row.update(response=resps[0][0], filtered={})
    elif len(args[0]) == 1:  # loglikelihood_rolling: (text,)
        row.update(loglikelihood=resps[0][0])
    else:  # loglikelihood: one (context, continuation) per choice
        row.update(choices=[a[1] for a in args], loglikelihoods=[r[0][0] for r in resps],
                   is_greedy=[bool(r[0][1]) for r in resps])
    row["metrics"] = {}
    return row
