"""k responses per prompt (``eval.generation.samples``): the reliable@k estimator and its standard errors,
the setting's validation, the per-sample seeds, and the HF backend's per-row seeded sampling."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from ifdistill.benchmarks.instruction_following.reliability import RELIABILITY_METRICS, prompt_values, reliability
from ifdistill.benchmarks.instruction_following.stats import aggregate
from ifdistill.config import ConfigError
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.generation import request_seed, sample_seed


def _scored(strict: bool, loose: bool) -> dict:
    return {"strict_prompt": strict, "loose_prompt": loose, "strict_inst": [strict], "loose_inst": [loose],
            "instruction_id_list": ["punctuation:no_comma"]}


def test_reliable_at_k_and_the_mean_pass_rate_by_hand():
    # 3 prompts x 4 responses, strict passes per prompt: 4/4, 2/4, 0/4 (loose: 4/4, 3/4, 1/4)
    strict = [[1, 1, 1, 1], [1, 0, 1, 0], [0, 0, 0, 0]]
    loose = [[1, 1, 1, 1], [1, 1, 1, 0], [0, 1, 0, 0]]
    groups = [[_scored(bool(s), bool(lo)) for s, lo in zip(srow, lrow)] for srow, lrow in zip(strict, loose)]
    out = reliability(groups)
    assert list(out) == [m + sfx for m in RELIABILITY_METRICS for sfx in ("", "_stderr")]
    # reliable@4: only prompt 1 passes every time -> 1/3, binomial se sqrt(p(1-p)/(n-1))
    assert out["reliable_at_k_strict"] == out["reliable_at_k_loose"] == pytest.approx(1 / 3)
    assert out["reliable_at_k_strict_stderr"] == pytest.approx(math.sqrt((1 / 3) * (2 / 3) / 2))
    # mean pass rate: the mean of per-prompt rates, se = sd(rates) / sqrt(n) (prompts as clusters)
    for mode, rates in (("strict", [1.0, 0.5, 0.0]), ("loose", [1.0, 0.75, 0.25])):
        assert out[f"pass_rate_{mode}"] == pytest.approx(statistics.mean(rates))
        # the tolerance: a few ulps of sums of 12 terms (the two formulas differ only in rounding)
        assert out[f"pass_rate_{mode}_stderr"] == pytest.approx(statistics.stdev(rates) / math.sqrt(3), rel=1e-12)
    assert prompt_values(groups[1]) == {"reliable_at_k_strict": 0.0, "pass_rate_strict": 0.5,
                                        "reliable_at_k_loose": 0.0, "pass_rate_loose": 0.75}


def test_reliable_at_k_never_exceeds_the_pass_rate_and_k_1_is_the_prompt_level_accuracy():
    rng = random.Random(7)
    for k in (1, 2, 5):
        groups = [[_scored(rng.random() < q, True) for _ in range(k)] for q in [rng.random() for _ in range(40)]]
        out = reliability(groups)
        assert out["reliable_at_k_strict"] <= out["pass_rate_strict"]
        if k == 1:  # one response: both are the prompt-level accuracy, with its binomial standard error
            single = aggregate([g[0] for g in groups])
            for name in ("reliable_at_k_strict", "pass_rate_strict"):
                assert out[name] == single["prompt_level_strict_acc"]
                assert out[f"{name}_stderr"] == pytest.approx(single["prompt_level_strict_acc_stderr"], rel=1e-12)


def test_unequal_response_counts_are_refused():
    with pytest.raises(ValueError, match="same number of responses"):
        reliability([[_scored(True, True)], [_scored(True, True), _scored(False, False)]])


def test_sample_0_has_a_single_evaluations_seed_and_every_other_its_own():
    assert sample_seed(3, "1001", 0) == request_seed(3, "1001")
    seeds = {sample_seed(3, key, j) for key in ("1001", "1002") for j in range(8)}
    assert len(seeds) == 16


@pytest.mark.parametrize("overrides, message", [
    (["eval.generation.samples=0"], "eval.generation.samples must be >= 1, got 0"),
    (["eval.generation.samples=4"], "eval.generation.samples=4 needs eval.generation.greedy=false"),
    (["eval.generation.greedy=false", "eval.generation.temperature=0"], "temperature must be > 0 when sampling"),
    (["eval=lmeval", "eval.generation.greedy=false", "eval.generation.samples=4"],
     "benchmark lmeval scores one response per prompt"),
    (["eval=judge", "eval.generation.greedy=false", "eval.generation.samples=2"],
     "benchmark judge scores one response per prompt"),
])
def test_the_setting_is_checked_at_start_up(overrides, message, tmp_path):
    with pytest.raises(ConfigError, match=message) as err:
        load_config(["eval=ifeval_local", *overrides], output_dir=str(tmp_path))
    assert "\n" not in str(err.value)


def test_the_hf_backend_samples_a_row_the_same_in_any_batch(tiny_model_dir):
    """Per-row generators: a request's response depends on its seed and prompt only, not on the batch it shares
    (the k responses of a prompt are k rows)."""
    from ifdistill.evaluator.backend_hf import HFBackend
    from ifdistill.evaluator.generation import Request, Sampling
    from ifdistill.evaluator.settings import RuntimeSettings

    backend = HFBackend(tiny_model_dir, adapter_dir=None, tokenizer_dir=tiny_model_dir, dtype="float32",
                        runtime=RuntimeSettings(hf_batch_size=8, num_threads=1))
    sampling = Sampling(greedy=False, temperature=1.0, top_p=1.0, top_k=0, stop=(), stop_token_ids=(2,))
    a = Request(token_ids=(5, 6, 7, 8), max_tokens=12, seed=11)
    others = [Request(token_ids=(9, 10), max_tokens=12, seed=s) for s in (1, 2)]
    alone = backend.generate([a], sampling, progress=False)[0]
    together = backend.generate([others[0], a, others[1], Request(a.token_ids, 12, seed=12)], sampling, progress=False)
    assert together[1] == alone and together[3] != alone  # another seed: another sample
    assert backend.generate([a], sampling, progress=False)[0] == alone


def test_seeded_sampling_keeps_the_tokens_transformers_warpers_keep():
    """Temperature, top-k, top-p: the tokens SeededSampling can draw are those transformers' own warpers leave."""
    import torch
    from transformers.generation.logits_process import (TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)

    from ifdistill.evaluator.backend_hf import SeededSampling
    from ifdistill.evaluator.generation import Sampling

    scores = torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 3
    for temperature, top_k, top_p in ((0.7, 0, 1.0), (1.0, 5, 1.0), (1.3, 0, 0.8), (0.9, 10, 0.5)):
        sampling = Sampling(greedy=False, temperature=temperature, top_p=top_p, top_k=top_k, stop=(), stop_token_ids=())
        expected = TemperatureLogitsWarper(temperature)(None, scores.clone())
        if top_k:
            expected = TopKLogitsWarper(top_k)(None, expected)
        if top_p < 1.0:
            expected = TopPLogitsWarper(top_p)(None, expected)
        allowed = torch.isfinite(expected)
        drawn = torch.zeros_like(allowed)
        for seed in range(200):
            out = SeededSampling([seed, seed + 1000, seed + 2000], sampling, "cpu")(None, scores.clone())
            assert (torch.isfinite(out).sum(-1) == 1).all()
            drawn |= torch.isfinite(out)
        assert (drawn <= allowed).all()  # never a token the warpers removed
        if top_k or top_p < 1.0:
            assert drawn[allowed].float().mean() > 0.5  # and the kept ones are drawn


def test_deltas_of_reliable_at_k_pair_on_each_prompts_own_value():
    """Between two k-runs, reliable@k and the pass rate pair by prompt on the rows' own values (``metrics``);
    the four IFEval aggregates still pair on the decisions. Hand-made rows, so the numbers are known."""
    from ifdistill.evaluator.output import PromptResult
    from ifdistill.results.paired import compare

    def rows(values):
        return [PromptResult(key=str(i), instruction_ids=("punctuation:no_comma",), strict_inst=(v >= 0.5,),
                             loose_inst=(v >= 0.5,), strict_prompt=v >= 0.5, loose_prompt=v >= 0.5,
                             values={"pass_rate_strict": v, "reliable_at_k_strict": float(v == 1.0)})
                for i, v in enumerate(values)]

    run, ref = rows([1.0, 1.0, 0.5, 0.25]), rows([1.0, 0.5, 0.5, 0.0])
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    metrics = {"pass_rate_strict": mean([1.0, 1.0, 0.5, 0.25]), "reliable_at_k_strict": 0.5,
               "prompt_level_strict_acc": 0.75}
    ref_metrics = {"pass_rate_strict": mean([1.0, 0.5, 0.5, 0.0]), "reliable_at_k_strict": 0.25,
                   "prompt_level_strict_acc": 0.75}
    out = compare(metrics, run, ref_metrics, ref, benchmark="ifeval", metrics=list(metrics), n_resamples=10)
    d = out["metrics"]
    diffs = [0.0, 0.5, 0.0, 0.25]  # per-prompt pass-rate differences
    assert d["pass_rate_strict"]["se_kind"] == "paired"
    assert d["pass_rate_strict"]["delta"] == pytest.approx(mean(diffs))
    assert d["pass_rate_strict"]["se"] == pytest.approx(statistics.stdev(diffs) / 2, rel=1e-12)  # sd / sqrt(4)
    assert d["reliable_at_k_strict"]["delta"] == pytest.approx(0.25) and d["reliable_at_k_strict"]["se_kind"] == "paired"
    assert d["prompt_level_strict_acc"]["delta"] == 0 and d["prompt_level_strict_acc"]["se_kind"] == "paired"
