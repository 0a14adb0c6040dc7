"""The judge's registration (:mod:`ifdistill.benchmarks.registry`): an LLM judge of the evaluated model's responses.

The evaluated model answers ``eval.data``'s rows as an instruction-following benchmark does (the same
plan, so the same prompts and generation as IFEval's on the same data, and the row check of the
instruction-checking base, :mod:`ifdistill.benchmarks.instruction_following.instruction_benchmark`), then a judge model
scores each response (``mode: absolute``) or compares it with a reference (``pairwise``):
:mod:`ifdistill.benchmarks.judge.run`. Its own config section (``eval.judge``) is validated here; its
metrics are the win rate or the mean score with their counts (:mod:`ifdistill.benchmarks.judge.verdicts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from ifdistill.benchmarks.instruction_following.instruction_benchmark import check_row, scorer_version
from ifdistill.benchmarks.judge.verdicts import JUDGE_MODES, JUDGE_PLACEHOLDERS
from ifdistill.benchmarks.base import Benchmark
from ifdistill.benchmarks.registry import register

#: The headline metric of each mode.
HEADLINE = {"absolute": "score_mean", "pairwise": "win_rate"}


def check_judge(j: Any) -> None:
    """``eval.judge``: a known mode, a positive budget, a score range, a reference for pairwise, and
    every placeholder in the active template."""
    from ifdistill.config import ConfigError

    if j.mode not in JUDGE_MODES:
        raise ConfigError(f"eval.judge.mode must be one of {JUDGE_MODES}, got {j.mode!r}")
    if j.max_new_tokens < 1:
        raise ConfigError(f"eval.judge.max_new_tokens must be >= 1, got {j.max_new_tokens}")
    if j.score_min > j.score_max:
        raise ConfigError(f"eval.judge.score_min {j.score_min} > eval.judge.score_max {j.score_max}")
    if j.mode == "pairwise" and not j.reference:
        raise ConfigError("eval.judge.reference: mode pairwise needs a samples.jsonl of reference responses")
    key = f"{j.mode}_template"
    for name in JUDGE_PLACEHOLDERS[j.mode]:
        if "{" + name + "}" not in getattr(j, key):
            raise ConfigError(f"eval.judge.{key}: lacks the placeholder {{{name}}}")


def _verdicts(row: Mapping[str, Any]) -> str:
    return "; ".join(f"{j['order']}: {j['verdict']['category']} {j['verdict']['value']}" for j in row["judgements"])


class Judge(Benchmark):
    name = "judge"
    display = "Judge"

    def check(self, settings: Any) -> None:
        check_judge(settings.judge)

    def prepare(self, settings: Any, run: Any, model_cfg: dict[str, Any], source: Any, *, t0: float) -> Any:
        from ifdistill.benchmarks.judge.run import with_judge
        from ifdistill.evaluator.plan import rows_plan

        return with_judge(rows_plan(settings, run, model_cfg, source, t0=t0, check_row=check_row,
                                    scorer_version=scorer_version))

    def execute(self, plan: Any, backend: Any, *, own: bool, runtime: Optional[dict[str, Any]],
                t0: float) -> dict[str, Any]:
        from ifdistill.benchmarks.judge.run import execute_judge

        return execute_judge(plan, backend, own=own, runtime=runtime, t0=t0)

    def claims(self, metric: str) -> bool:
        return metric.removesuffix("_stderr") in HEADLINE.values()

    def is_fraction(self, metric: str) -> bool:
        return metric == HEADLINE["pairwise"]  # a win rate; a mean score is on the judge's scale

    def headline_metrics(self, results: Mapping[str, Any]) -> list[str]:
        metrics = results.get("metrics") or {}
        return [m for m in HEADLINE.values() if m in metrics] or [HEADLINE["absolute"]]

    def summary(self, results: Mapping[str, Any]) -> list[str]:
        from ifdistill.benchmarks.judge.run import summary_line

        t = results["timings"]
        return [f"  prompts {results['metrics']['num_prompts']}  {summary_line(results)}",
                f"  time: prepare {t['prepare_s']:.1f}s  load {t['load_s']:.1f}s  generate {t['generate_s']:.1f}s  "
                f"judge {t['judge_s']:.1f}s"]

    def sample_table(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[Any]]]:
        """Each prompt's response, every judgement's parsed verdict and the pair's outcome (pairwise) or the
        score (absolute)."""
        last = "outcome" if any("outcome" in r for r in rows) else "score"
        return (["key", "prompt", "response", "judgements", last],
                [[str(r.get("key")), r.get("prompt", ""), r.get("response", ""), _verdicts(r), str(r.get(last))]
                 for r in rows])

    def smoke_overrides(self, workdir: Path) -> list[str]:
        """IFEval's offline prompts, the tiny model as its own judge."""
        return ["eval=judge", "eval.data.hf_name=null", "eval.data.path=${paths.shared_data_dir}/ifeval/input_data.jsonl",
                "eval.data.max_examples=3", "eval.generation.max_new_tokens=4",
                "eval.judge.model.name_or_path=builtin:tiny", "eval.judge.max_new_tokens=4"]

    def panel_metrics(self, section: Mapping[str, Any]) -> list[str]:
        return [HEADLINE[str(((section.get("judge") or {}).get("mode")) or "absolute")]]


register(Judge())
