"""The lm-eval results format: metric names with their standard errors, one samples row per document,
and the readers that log and list them (W&B keys, the checkpoint line, ``ifdistill-status``)."""

from __future__ import annotations

from ifdistill.benchmarks.lmeval.output import metrics_of, sample_rows
from ifdistill.callbacks.eval_logging import evaluation_line, flat_metrics
from ifdistill.cli.status import _task_scores

RES = {  # the shape of lm_eval.evaluator.evaluate's return value (two filters on gsm8k, one group)
    "results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.1,
                          "exact_match,flexible-extract": 0.5, "exact_match_stderr,flexible-extract": 0.2},
                "csqa": {"alias": "csqa", "acc,none": 0.4, "acc_stderr,none": "N/A"}},
    "groups": {"table": {"alias": "table", "acc,none": 0.4, "acc_stderr,none": 0.05}},
    "samples": {
        "gsm8k": [{"doc_id": 0, "doc_hash": "h", "target": "4", "arguments": [("Q: 2+2?", {"until": ["Q:"]})],
                   "resps": [["4"]], "filtered_resps": [v], "filter": f, "metrics": ["exact_match"], "exact_match": m}
                  for f, v, m in (("strict-match", "[invalid]", 0.0), ("flexible-extract", "4", 1.0))],
        "csqa": [{"doc_id": 0, "doc_hash": "g", "target": 1, "arguments": [("Q?", " A"), ("Q?", " B")],
                  "resps": [[(-2.0, False)], [(-1.0, True)]], "filtered_resps": [(-2.0, False), (-1.0, True)],
                  "filter": "none", "metrics": ["acc"], "acc": 1.0}],
    },
}


def test_metric_names_and_standard_errors():
    m = metrics_of(RES)
    assert m == {"gsm8k/exact_match/strict-match": 0.25, "gsm8k/exact_match/strict-match_stderr": 0.1,
                 "gsm8k/exact_match/flexible-extract": 0.5, "gsm8k/exact_match/flexible-extract_stderr": 0.2,
                 "csqa/acc": 0.4, "csqa/acc_stderr": None, "table/acc": 0.4, "table/acc_stderr": 0.05}


def test_one_row_per_document_with_every_filter():
    gen, mc = sample_rows(RES, ["gsm8k", "csqa"])
    assert gen["key"] == "gsm8k/0" and gen["response"] == "4" and gen["prompt"] == "Q: 2+2?"
    assert gen["filtered"] == {"strict-match": "[invalid]", "flexible-extract": "4"}
    assert gen["metrics"] == {"exact_match/strict-match": 0.0, "exact_match/flexible-extract": 1.0}
    assert mc["choices"] == [" A", " B"] and mc["loglikelihoods"] == [-2.0, -1.0] and mc["is_greedy"] == [False, True]
    assert mc["metrics"] == {"acc": 1.0} and "response" not in mc


def test_loggers_and_status_show_every_task_metric():
    results = {"config": {"eval": {"benchmark": "lmeval"}}, "metrics": metrics_of(RES)}
    flat = flat_metrics(results)
    assert flat["lmeval/gsm8k/exact_match/strict-match"] == 0.25 and "lmeval/csqa/acc_stderr" not in flat
    line = evaluation_line(20, results)
    assert "gsm8k/exact match/strict-match 0.2500±0.1000" in line and "csqa/acc 0.4000" in line
    assert _task_scores(results["metrics"]).startswith("gsm8k/exact_match/strict-match 0.2500±0.1000; ")
