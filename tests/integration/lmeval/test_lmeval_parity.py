"""lm-eval tasks through ifdistill's engine equal lm-eval's own ``hf`` model, per document.

One model (tiny_qwen3 after a few steps of gsm8k-style language modelling: local_tasks.trained_model),
three local tasks running lm-eval's real definitions (local_tasks.py): gsm8k (generate_until, two regex
filters), commonsense_qa (multiple choice, 5 choices) and wikitext (rolling log-likelihood), 12
documents each. Evaluated three ways: ``ifdistill-eval eval=lmeval`` with the HF backend, with the vLLM
backend, and lm-eval's ``simple_evaluate(model="hf")``. Per document: identical responses and filtered
answers, identical chosen answers, log-likelihoods within the float32 tolerance below; aggregates equal.
Once more for gsm8k with the chat template and few-shot as multi-turn (HF backend).

Tolerance: every log-likelihood is a sum of float32 log-softmax values; the engines compute the same
function with different batch shapes, padding and kernels (HF: left-padded vs lm-eval's right-padded
rows; vLLM: its own attention and GEMM kernels), so the sums differ only by the order of float32
reductions. A reduction of n terms in a different order changes the result by at most about
n * eps32 relative in the worst case and sqrt(n) * eps32 typically; the largest reduction here is the
softmax over the 151,936-entry vocabulary (sqrt ~ 390). The bound used is 1000 * eps32 * max(1, |ll|):
above that typical size, far below any real difference (a wrong token or position changes ll by > 0.01).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ifdistill.benchmarks.lmeval.output import metrics_of, sample_rows
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.output import SAMPLES_FILE
from ifdistill.evaluator.results import jsonable
from ifdistill.evaluator.run import evaluate
from tests.integration.evaluator.tuned import require_vllm
from tests.integration.lmeval.local_tasks import trained_model, write_tasks

pytestmark = pytest.mark.slow

TASKS = ["gsm8k_local", "commonsense_qa_local", "wikitext_local"]
N_DOCS = 12
EPS32 = float(np.finfo(np.float32).eps)


def ll_tol(ll: float) -> float:
    """The float32 reduction-order tolerance of a summed log-likelihood (module docstring)."""
    return 1000 * EPS32 * max(1.0, abs(ll))


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_qwen3_dir):
    root = tmp_path_factory.mktemp("lmeval_parity")
    return {"root": root, "tasks": write_tasks(root, n_test=N_DOCS), "model": trained_model(tiny_qwen3_dir)}


def lm_eval_hf(setup, tasks: list[str], **kwargs) -> dict:
    """lm-eval's own ``hf`` model on the same model, tasks and few-shot seed."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    res = simple_evaluate(model="hf", model_args={"pretrained": str(setup["model"]), "dtype": "float32",
                                                  "device": "cpu", "enable_thinking": False},
                          tasks=tasks, task_manager=TaskManager(include_path=[str(setup["tasks"])]), batch_size=8,
                          log_samples=True, fewshot_random_seed=1234, **kwargs)
    return {"metrics": metrics_of(res), "samples": jsonable(sample_rows(res, tasks))}  # as samples.jsonl holds them


@pytest.fixture(scope="module")
def reference(setup):
    return lm_eval_hf(setup, TASKS)


def ours(setup, backend: str, tasks: list[str] = TASKS, *extra: str) -> dict:
    out = setup["root"] / f"{backend}-{len(extra)}"
    config = load_config(["eval=lmeval", f"eval.backend={backend}", f"eval.lmeval.tasks=[{','.join(tasks)}]",
                          f"eval.lmeval.include_path=[{setup['tasks']}]", "model=tiny_qwen3",
                         f"model.name_or_path={setup['model']}", "eval.runtime.progress=false",
                         "eval.runtime.kv_cache_memory_bytes=67108864", "eval.runtime.num_threads=1", *extra],
                         output_dir=str(out))
    results = evaluate(config)
    samples = [json.loads(line) for line in (out / SAMPLES_FILE).read_text().splitlines()]
    return {"metrics": results["metrics"], "samples": samples, "counts": results["counts"]}


def assert_parity(mine: dict, ref: dict) -> dict:
    assert [s["key"] for s in mine["samples"]] == [s["key"] for s in ref["samples"]]
    counts = {"documents": len(ref["samples"]), "responses_equal": 0, "choices_equal": 0, "rolling_within": 0,
              "max_ll_diff_over_tol": 0.0}
    for a, b in zip(mine["samples"], ref["samples"]):
        assert a["prompt"] == b["prompt"] and a["target"] == b["target"], a["key"]
        if "response" in b:
            assert a["response"] == b["response"] and a["filtered"] == b["filtered"], a["key"]
            counts["responses_equal"] += 1
        elif "choices" in b:
            assert int(np.argmax(a["loglikelihoods"])) == int(np.argmax(b["loglikelihoods"])), a["key"]
            for x, y in zip(a["loglikelihoods"], b["loglikelihoods"]):
                assert abs(x - y) <= ll_tol(y), (a["key"], x, y)
                counts["max_ll_diff_over_tol"] = max(counts["max_ll_diff_over_tol"], abs(x - y) / ll_tol(y))
            counts["choices_equal"] += 1
        else:
            assert abs(a["loglikelihood"] - b["loglikelihood"]) <= ll_tol(b["loglikelihood"]), a["key"]
            counts["rolling_within"] += 1
        for metric, value in b["metrics"].items():
            if isinstance(value, list):  # perplexity terms: (log-likelihood, word or byte count)
                assert abs(a["metrics"][metric][0] - value[0]) <= ll_tol(value[0]) and a["metrics"][metric][1] == value[1]
            else:
                assert a["metrics"][metric] == value, (a["key"], metric)
    assert set(mine["metrics"]) == set(ref["metrics"])
    for key, value in ref["metrics"].items():
        if key.startswith("wikitext_local/") and value is not None:
            # exp/2^ of (summed ll / count): relative error = the summed ll's absolute error / count <= tol
            total = sum(abs(s["loglikelihood"]) for s in ref["samples"] if s["task"] == "wikitext_local")
            assert math.isclose(mine["metrics"][key], value, rel_tol=ll_tol(total)), key
        else:
            assert mine["metrics"][key] == value, key
    return counts


def test_hf_backend_equals_lm_eval_hf(setup, reference):
    mine = ours(setup, "hf")
    counts = assert_parity(mine, reference)
    print("hf backend vs lm-eval hf:", counts, mine["counts"])
    assert counts["responses_equal"] == counts["choices_equal"] == counts["rolling_within"] == N_DOCS
    # the comparison is not vacuous: responses stop at a stop string, and they are not all one text
    assert mine["counts"]["finish_reasons"].get("stop", 0) > 0
    assert len({s["response"] for s in reference["samples"] if "response" in s}) > 1


def test_vllm_backend_equals_lm_eval_hf(setup, reference):
    require_vllm()
    mine = ours(setup, "vllm")
    counts = assert_parity(mine, reference)
    print("vllm backend vs lm-eval hf:", counts, mine["counts"])
    assert counts["responses_equal"] == counts["choices_equal"] == counts["rolling_within"] == N_DOCS


def test_chat_template_and_multiturn_fewshot_equal_lm_eval_hf(setup):
    """gsm8k with the chat template (tiny_qwen3's: Qwen3's, thinking off) and the two demonstrations as
    earlier user/assistant turns: the evaluator's template rendering equals lm-eval hf's, per document."""
    ref = lm_eval_hf(setup, ["gsm8k_local"], apply_chat_template=True, fewshot_as_multiturn=True)
    mine = ours(setup, "hf", ["gsm8k_local"], "eval.lmeval.apply_chat_template=true",
                "eval.lmeval.fewshot_as_multiturn=true")
    counts = assert_parity(mine, ref)
    assert counts["responses_equal"] == N_DOCS
    assert all(s["prompt"].count("<|im_start|>user") == 3 for s in mine["samples"])  # 2 demonstrations + the question
