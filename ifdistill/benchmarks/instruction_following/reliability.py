"""reliable@k beside the mean pass rate: k sampled responses per prompt (``eval.generation.samples``).

Notation: prompt ``i = 1..n`` gets ``k`` responses, each sampled with a seed of its own
(:func:`ifdistill.evaluator.generation.sample_seed`); ``X_ij`` is 1 when response ``j`` follows every
instruction of prompt ``i`` (prompt level, strict or loose), and ``q_i`` is the prompt's probability that
one response does.

**Mean pass rate** (``pass_rate_<mode>``): ``p = (1/n) sum_i xbar_i`` with ``xbar_i = (1/k) sum_j X_ij``, an
unbiased estimate of ``E[q]``. The k responses of a prompt share it, so they are not independent draws: the
standard error treats prompts as clusters (the cluster-robust ratio estimator of
:func:`ifdistill.statistics.clustered_ratio_stderr` with ``k`` outcomes per cluster), which reduces to the
standard error of the mean of the per-prompt rates:

    se(p) = sqrt( sum_i (xbar_i - p)^2 / (n (n - 1)) )

**reliable@k** (``reliable_at_k_<mode>``): ``r = (1/n) sum_i R_i`` with ``R_i = prod_j X_ij`` (every one of
the k responses passes). ``R_i`` is an unbiased estimate of ``q_i^k``, so ``r`` estimates ``E[q^k]``, the
probability that k fresh responses to a random prompt all pass. The ``R_i`` are independent 0/1 outcomes,
so its standard error is the binomial one the prompt-level accuracies carry:

    se(r) = sqrt( r (1 - r) / (n - 1) )

Since ``R_i <= xbar_i`` for every prompt, ``r <= p`` always; at ``k = 1`` both equal the prompt-level
accuracy of the single response. Both standard errors cover the draw of prompts and of responses; neither
assumes the prompts are equally hard. Each prompt's own ``xbar_i`` and ``R_i`` are in its samples.jsonl row
(``metrics``), so two evaluations' differences pair by prompt
(:meth:`~ifdistill.benchmarks.base.Benchmark.document_values`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ifdistill.statistics import binomial_stderr, clustered_ratio_stderr

MODES = ("strict", "loose")
#: The metrics k responses per prompt add, in the order tables show them.
RELIABILITY_METRICS = tuple(f"{kind}_{mode}" for mode in MODES for kind in ("reliable_at_k", "pass_rate"))


def prompt_values(responses: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """One prompt's ``pass_rate_<mode>`` (share of its responses that pass) and ``reliable_at_k_<mode>`` (1.0
    when all of them pass), from its scored responses (``strict_prompt`` / ``loose_prompt`` each)."""
    if not responses:
        raise ValueError("a prompt needs at least one scored response")
    out = {}
    for mode in MODES:
        passed = [bool(r[f"{mode}_prompt"]) for r in responses]
        out[f"reliable_at_k_{mode}"] = float(all(passed))
        out[f"pass_rate_{mode}"] = sum(passed) / len(passed)
    return out


def reliability(groups: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """reliable@k and the mean pass rate (strict and loose) with standard errors (module docstring) of
    ``groups``: per prompt, its k scored responses (the same k for every prompt)."""
    sizes = {len(g) for g in groups}
    if not groups or len(sizes) != 1:
        raise ValueError(f"reliability needs the same number of responses for every prompt, got sizes {sorted(sizes)}")
    (k,) = sizes
    per_prompt = [prompt_values(g) for g in groups]
    n = len(per_prompt)
    out: dict[str, Any] = {}
    for mode in MODES:
        reliable = sum(int(v[f"reliable_at_k_{mode}"]) for v in per_prompt)
        passed = [round(v[f"pass_rate_{mode}"] * k) for v in per_prompt]
        out[f"reliable_at_k_{mode}"] = reliable / n
        out[f"reliable_at_k_{mode}_stderr"] = binomial_stderr(reliable, n)
        out[f"pass_rate_{mode}"] = sum(passed) / (n * k)
        out[f"pass_rate_{mode}_stderr"] = clustered_ratio_stderr(passed, [k] * n)
    return {m + suffix: out[m + suffix] for m in RELIABILITY_METRICS for suffix in ("", "_stderr")}
