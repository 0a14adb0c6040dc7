"""A judge column on the results page: win rates shown with their standard error, and judged numbers
from different eval_config_hash values (another judge, template or reference) marked, kept out of
deltas, and never averaged into a sweep curve."""

from __future__ import annotations

import math
import statistics

import pytest

from ifdistill.benchmarks.judge import verdicts as V
from ifdistill.evaluator.results import publish
from ifdistill.results import run_metrics
from ifdistill.cli.report import write_report
from ifdistill.results.page import PageOptions, build_page, parse_column
from ifdistill.results.runs import load_all

from tests.unit.results.result_files import simple_rows, write_run_dir

COLUMN = "Judge win rate"
STEPS = (50, 100)
TOL = 1e-12  # means of at most 20 values in {0, 1/2, 1}: exact to ~1e-15


def outcomes_for(seed: int, step: int) -> list[str]:
    wins = 4 + seed + step // 50
    return ["win"] * wins + ["tie"] * 3 + ["loss"] * (17 - wins)


def add_judge(run_dir, step: int, outcomes: list[str], eval_config_hash: str) -> dict:
    """A judged evaluation at ``step`` through the evaluator's writer and the run's metrics.json."""
    rel = f"evals/judge/step_{step:06d}"
    metrics = {**V.pairwise_metrics(outcomes, []), "num_prompts": len(outcomes)}
    results = {"schema_version": 1, "eval_config_hash": eval_config_hash, "metrics": metrics,
               "config": {"eval": {"benchmark": "judge"}}, "judge": {"mode": "pairwise"}}
    publish(run_dir / rel, results, [{"key": str(i), "outcome": o} for i, o in enumerate(outcomes)])
    run_metrics.record_checkpoint(run_dir, step, results, rel, "callback", benchmark="judge")
    return metrics


@pytest.fixture()
def judged_runs(tmp_path):
    """Three seeds of one setup; seed 3's judge differs (another eval_config_hash)."""
    for seed in (1, 2, 3):
        run = write_run_dir(tmp_path / "sweep" / f"s{seed}", run_id=f"s{seed}", seed=seed,
                            config={"method": {"name": "sft"}, "lr": 1e-5},
                            checkpoints={s: simple_rows([i < 10 for i in range(20)]) for s in STEPS}, method="sft",
                            config_hash=f"cfg-s{seed}")
        for step in STEPS:
            add_judge(run, step, outcomes_for(seed, step), "judge-other" if seed == 3 else "judge-cfg")
    return tmp_path


def _rate(outcomes):
    return statistics.mean({"win": 1.0, "tie": 0.5, "loss": 0.0}[o] for o in outcomes)


def test_judge_column_marks_other_hashes_and_never_averages_them(judged_runs):
    runs = load_all([judged_runs / "sweep"])
    options = PageOptions(columns=(parse_column(f"{COLUMN}=judge:win_rate"),))
    page = build_page(runs, options=options)
    (column,) = page["columns"]
    assert column["benchmark"] == "judge" and column["eval_config_hash"] == "judge-cfg"  # the most common
    rows = {r["name"]: r for r in page["rows"]}
    for seed in (1, 2, 3):
        cell = rows[f"s{seed}"]["cells"][COLUMN]
        values = [{"win": 1.0, "tie": 0.5, "loss": 0.0}[o] for o in outcomes_for(seed, 100)]
        assert cell["value"] == pytest.approx(statistics.mean(values), abs=TOL)
        assert cell["se"] == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)), abs=TOL)
        assert cell["mismatch"] is (seed == 3)
    against = {d["row"]: d["columns"][COLUMN] for d in page["deltas"]}
    assert against["s3"]["refused"] == "eval config differs" and against["s2"]["refused"] is None
    assert against["s2"]["delta"] == pytest.approx(_rate(outcomes_for(2, 100)) - _rate(outcomes_for(1, 100)), abs=TOL)
    (curve,) = page["curves"]
    for point in curve["columns"][COLUMN]:
        kept = [_rate(outcomes_for(seed, point["step"])) for seed in (1, 2)]  # seed 3 left out
        assert point["n"] == 2 and point["mean"] == pytest.approx(statistics.mean(kept), abs=TOL)
    assert any(f"{COLUMN} curve: s3" in n and "never averaged" in n for n in page["notes"])


def test_judge_column_in_the_written_report(judged_runs):
    out = write_report([judged_runs / "sweep"], judged_runs / "report",
                       page_options=PageOptions(columns=(parse_column(f"{COLUMN}=judge:win_rate"),)))
    md = (judged_runs / "report" / "report.md").read_text()
    assert COLUMN in md and "‡" in md
    assert out["report"]["page"]["columns"][0]["metric"] == "win_rate"


def test_parse_column_knows_the_judge():
    assert parse_column("judge:score_mean").benchmark == "judge"
    with pytest.raises(ValueError, match="judge"):
        parse_column("nojudge:win_rate")


def test_a_judge_entry_without_its_results_dir_is_still_the_judge(judged_runs):
    """metrics.json keeps the metrics when results.json is gone: the judge's keep their benchmark."""
    from ifdistill.results.runs import read_evaluation

    entry = run_metrics.results_of(run_metrics.read(judged_runs / "sweep" / "s1"), "judge")["100"]
    evaluation = read_evaluation("judge", 100, entry, None)
    assert evaluation.benchmark == "judge"
    assert evaluation.metrics["win_rate"] == pytest.approx(_rate(outcomes_for(1, 100)), abs=TOL)
