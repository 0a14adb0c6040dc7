"""The ICL gap of a base model: k-shot minus 0-shot on one benchmark, from two evaluator outputs, paired.

Why it matters: ICL logit distillation trains the student (the model without demonstrations) towards
the teacher (the same model *with* k demonstrations in context). The gap between the two is the most
that distillation can transfer; ../shared/context.md reports it small for IFEval (Qwen3-1.7B: 7.21% ->
8.50% prompt strict, 39 -> 46 of 541 prompts), because the constraints are already stated in each
prompt. A gap inside two standard errors means there is nothing to distil.

Producing the two inputs: the same evaluator, config and model, differing only in the number of
demonstrations ``eval.fewshot.k`` (drawn deterministically from ``eval.fewshot.pool``, never the
evaluated prompt)::

    ifdistill-eval model=qwen3_1.7b eval.generation.max_new_tokens=512 eval.fewshot.k=0 output_dir=out/icl/k0
    ifdistill-eval model=qwen3_1.7b eval.generation.max_new_tokens=512 eval.fewshot.k=4 output_dir=out/icl/k4
    ifdistill-report icl-gap out/icl/k0 out/icl/k4 -o out/icl

(``eval=ifeval_local`` for the shared copy of IFEval with the synthetic demo pool, offline.) The report
checks that both outputs name the same model (weights, adapter, tokenizer and chat template digests)
and that their configs differ only in few-shot keys (and outputs/resources), and warns otherwise.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ifdistill.benchmarks import registry
from ifdistill.benchmarks.base import short_name
from ifdistill.evaluator import output as eval_output
from ifdistill.results import paired, run_config
from ifdistill.results.report import json_safe
from ifdistill.results.tables import cell, delta_cell, markdown_table, p_value

# Where k sits in results.json's config: ``eval.fewshot.k`` (the evaluator's key) or an older name.
K_KEYS = ("fewshot.k", "num_fewshot", "k_shot", "n_shot", "num_shots")
# Config parts expected to differ between the two evaluations: few-shot settings, resources, outputs.
EXPECTED_PARTS = ("fewshot", "num_fewshot", "runtime", "output_dir", "overwrite")
MODEL_KEYS = ("path", "adapter_path", "weights_digest", "weights_sha256", "adapter_weights_sha256",
              "tokenizer_sha256", "chat_template_sha256")


def _k_of(config: dict) -> Any:
    flat = run_config.flatten(config)
    for key in K_KEYS:
        for name, value in flat.items():
            if (name == key or name.endswith("." + key)) and isinstance(value, int):
                return value
    return None


def icl_gap(zero_shot_dir: str | os.PathLike, k_shot_dir: str | os.PathLike, *, n_resamples: int = 10000,
            seed: int = 0, confidence: float = 0.95) -> dict[str, Any]:
    """The benchmark's metrics at 0 and k shots, the gap (k - 0) with paired se (McNemar and bootstrap
    where the benchmark has per-prompt decisions). Two benchmarks are an error."""
    zero, kshot = eval_output.load(zero_shot_dir), eval_output.load(k_shot_dir)
    names = {eval_output.benchmark_of(zero.raw), eval_output.benchmark_of(kshot.raw)}
    if len(names) > 1:
        raise ValueError(f"{zero_shot_dir} and {k_shot_dir}: evaluations of different benchmarks ({sorted(names)})")
    bench = registry.get(names.pop())
    zero_samples, k_samples = ((d.samples if bench.prompt_decisions else d.rows) for d in (zero, kshot))
    flat_zero, flat_k = run_config.flatten(zero.eval_config), run_config.flatten(kshot.eval_config)
    differing = sorted(k for k in set(flat_zero) | set(flat_k) if flat_zero.get(k) != flat_k.get(k))
    unexpected = [k for k in differing if not any(part in EXPECTED_PARTS for part in k.split("."))]
    same_model = all(zero.model.get(k) == kshot.model.get(k) for k in MODEL_KEYS)
    comparison = paired.compare(kshot.metrics, k_samples, zero.metrics, zero_samples, benchmark=bench.name,
                                metrics=bench.headline_metrics(kshot.raw), n_resamples=n_resamples, seed=seed,
                                confidence=confidence)
    return {
        "zero_shot": {"path": str(zero.path), "k": _k_of(zero.eval_config), "metrics": zero.metrics,
                      "eval_config_hash": zero.eval_config_hash},
        "k_shot": {"path": str(kshot.path), "k": _k_of(kshot.eval_config), "metrics": kshot.metrics,
                   "eval_config_hash": kshot.eval_config_hash},
        "benchmark": bench.name, "fraction": {m: bench.is_fraction(m) for m in comparison["metrics"]},
        "same_model": same_model,
        "config_differences": differing,
        "unexpected_differences": unexpected,
        "gap": comparison,
    }


def render_markdown(gap: dict[str, Any]) -> str:
    z, k, g = gap["zero_shot"], gap["k_shot"], gap["gap"]
    kz = z["k"] if z["k"] is not None else 0
    kk = k["k"] if k["k"] is not None else "k"
    fraction = gap["fraction"]  # per metric: percent and percentage points, else the metric's own unit
    header = ["metric", f"{kz}-shot", f"{kk}-shot", "gap (pp)" if all(fraction.values()) else "gap (pp for percentages)"]
    rows = [[short_name(m), *(cell({"fraction": fraction[m]}, side["metrics"].get(m), side["metrics"].get(f"{m}_stderr"))
                                       for side in (z, k)), delta_cell({"fraction": fraction[m]}, d)]
            for m, d in g["metrics"].items()]
    kinds = sorted({d["se_kind"] for d in g["metrics"].values()}) or ["unpaired"]
    lines = ["# ICL gap", "", f"- {kz}-shot: `{z['path']}`", f"- {kk}-shot: `{k['path']}`", "",
             *markdown_table(header, rows), "",
             f"Gap = {kk}-shot minus {kz}-shot ± its {'/'.join(kinds)} standard error "
             f"(n = {g['n_paired']} paired prompts or documents); `~`: under 2 standard errors (no gap to distil); "
             "MDE: the smallest gap that rule finds 80 % of the time, (2 + 0.8416) x se.", ""]
    for mode in ("strict", "loose"):
        t, b = g["mcnemar"].get(mode), g["bootstrap"].get(mode)
        if t:
            lines.append(f"- prompt {mode}: {t['gained']} prompts gained with demonstrations, {t['lost']} lost; "
                         f"McNemar {p_value(t['p_value'])}; bootstrap {int(100 * b['confidence'])}% CI "
                         f"[{100 * b['ci_low']:+.2f}, {100 * b['ci_high']:+.2f}] pp")
    if not gap["same_model"]:
        lines.append("- **warning**: the two results name different models (path, weights or tokenizer).")
    if gap["unexpected_differences"]:
        lines.append("- **warning**: the eval configs also differ in "
                     + ", ".join(f"`{x}`" for x in gap["unexpected_differences"]))
    return "\n".join(lines).rstrip() + "\n"


def write(gap: dict[str, Any], out_dir: str | os.PathLike) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "icl_gap.json").write_text(json.dumps(json_safe(gap), indent=2, sort_keys=True) + "\n")
    (out / "icl_gap.md").write_text(render_markdown(gap))
    return [out / "icl_gap.json", out / "icl_gap.md"]
