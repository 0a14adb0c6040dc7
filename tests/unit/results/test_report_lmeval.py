"""``ifdistill-report``'s per-run tables of a benchmark other than IFEval: an lm-eval section.

Two seeds of one setup, each with lm-eval evaluated at two checkpoints, and the base model's lm-eval
evaluation. The report's columns are lm-eval's metrics (not IFEval's four), the best checkpoint is the
headline's best, deltas against the base pair the documents by key (the expected delta and standard
error computed here from the per-document values), and seed groups spread lm-eval's metrics.
"""

from __future__ import annotations

import math
import statistics

from ifdistill.results import runs, tables
from ifdistill.results.report import ReportOptions, build_report
from tests.unit.results.result_files import add_lmeval, simple_rows, write_lmeval_dir, write_run_dir

N = 40
GSM, CSQA = "gsm8k/exact_match/strict-match", "commonsense_qa/acc"
BASE = {"gsm8k": [float(i % 4 == 0) for i in range(N)], "commonsense_qa": [float(i % 2 == 0) for i in range(N)]}
# seed -> step -> gsm8k per document (commonsense_qa: the base's at every step)
RUNS = {1: {50: [float(i % 2 == 0) for i in range(N)], 100: [float(i % 3 == 0) for i in range(N)]},
        2: {50: [float(i % 5 == 0) for i in range(N)], 100: [float(i % 2 == 0) for i in range(N)]}}


def _tasks(gsm):
    return {"gsm8k": ("exact_match", "strict-match", gsm), "commonsense_qa": ("acc", "none", BASE["commonsense_qa"])}


def _report(tmp_path):
    for seed, steps in RUNS.items():
        run = write_run_dir(tmp_path / "sweep" / f"s{seed}", run_id=f"s{seed}", seed=seed,
                            config={"method": {"name": "sft"}, "lr": 1e-5},
                            checkpoints={s: simple_rows([True, False]) for s in steps}, method="sft")
        for step, gsm in steps.items():
            add_lmeval(run, step, _tasks(gsm))
    write_lmeval_dir(tmp_path / "base", _tasks(BASE["gsm8k"]))
    loaded = runs.load_all([tmp_path / "sweep"], benchmark="lmeval")
    base = runs.load_eval_dir(tmp_path / "base", name="base", method="base")
    return build_report(loaded, base, ReportOptions(n_resamples=10))


def test_lmeval_columns_best_paired_deltas_and_seed_spread(tmp_path):
    report = _report(tmp_path)
    assert sorted(c["metric"] for c in report["columns"]) == sorted([GSM, CSQA])
    # exact_match and acc are rates: percent, as on the results page (the metric's own is_fraction)
    assert all(c["benchmark"] == "lmeval" and c["fraction"] is True for c in report["columns"])
    headline = report["columns"][0]["metric"]
    assert report["options"]["select_metric"] == headline == GSM  # lm-eval's first metric, gsm8k's

    rows = {r["name"]: r for r in report["runs"]}
    for seed, steps in RUNS.items():
        row = rows[f"s{seed}"]
        means = {s: sum(v) / N for s, v in steps.items()}
        assert row["final_step"] == 100 and row["final"][GSM] == means[100]
        assert row["best_step"] == max(means, key=lambda s: (means[s], -s))

    deltas = {d["run"]: d for d in report["deltas"]}
    for seed, steps in RUNS.items():
        d = [a - b for a, b in zip(steps[100], BASE["gsm8k"])]
        got = deltas[f"s{seed}"]["metrics"][GSM]
        assert got["se_kind"] == "paired" and deltas[f"s{seed}"]["n_paired"] == N
        # sums of N values in {-1, 0, 1}: the mean is exact to a few ulps; se through one sqrt
        assert math.isclose(got["delta"], sum(d) / N, rel_tol=1e-12, abs_tol=1e-15)
        assert math.isclose(got["se"], statistics.stdev(d) / math.sqrt(N), rel_tol=1e-12)
        same = deltas[f"s{seed}"]["metrics"][CSQA]  # unchanged documents: no difference at all
        assert same["delta"] == 0 and same["se"] == 0 and same["within_2se"] is True
        assert deltas[f"s{seed}"]["mcnemar"] == {} and deltas[f"s{seed}"]["bootstrap"] == {}
    assert report["per_instruction_type"]["runs"] == {}  # lm-eval has no instruction types

    (group,) = report["seed_groups"]
    finals = [sum(steps[100]) / N for steps in RUNS.values()]
    assert math.isclose(group["stats"][GSM]["mean"], statistics.mean(finals), rel_tol=1e-12)
    assert math.isclose(group["stats"][GSM]["sd"], statistics.stdev(finals), rel_tol=1e-12)

    md = tables.render_markdown(report, title="lm-eval report")
    runs_table = md.split("## Runs")[1].split("##")[0]
    assert "prompt strict" not in md and "McNemar" not in md
    assert f"| {100 * rows['s1']['final'][GSM]:.2f} ± " in runs_table  # a rate in percent
    assert f"Δ {report['columns'][0]['label']}" in md and f"best {report['columns'][0]['label']}" in runs_table


def test_two_sections_of_one_benchmark_are_two_page_columns(tmp_path):
    """``evals.lmeval`` and ``evals.lab``, both lm-eval with the same task: a column naming its section reads
    only that section, at the final step and in the sweep curve (never their mean); the base model's
    stand-alone evaluation fills both."""
    from ifdistill.results.page import PageOptions, build_page, parse_column

    lab = [float(i % 8 == 0) for i in range(N)]
    run = write_run_dir(tmp_path / "sweep" / "r", run_id="r", seed=1, config={"lr": 1e-5},
                        checkpoints={s: simple_rows([True]) for s in (50, 100)})
    for step, gsm in RUNS[1].items():
        add_lmeval(run, step, _tasks(gsm))
        add_lmeval(run, step, _tasks(lab), name="lab")
    write_lmeval_dir(tmp_path / "base", _tasks(BASE["gsm8k"]))
    cols = tuple(parse_column(f"{s}=lmeval@{s}:{GSM}") for s in ("lmeval", "lab"))
    assert cols[1].section == "lab" and cols[1].benchmark == "lmeval" and cols[1].metric == GSM
    page = build_page(runs.load_all([tmp_path / "sweep"]), [tmp_path / "base"], PageOptions(columns=cols))
    base, row = page["rows"]
    assert row["cells"]["lmeval"]["value"] == sum(RUNS[1][100]) / N and row["cells"]["lmeval"]["section"] == "lmeval"
    assert row["cells"]["lab"]["value"] == sum(lab) / N and row["cells"]["lab"]["section"] == "lab"
    assert base["cells"]["lmeval"]["value"] == base["cells"]["lab"]["value"] == sum(BASE["gsm8k"]) / N
    (curves,) = page["curves"]
    assert [(p["step"], p["mean"], p["n"]) for p in curves["columns"]["lab"]] == [(50, sum(lab) / N, 1),
                                                                                  (100, sum(lab) / N, 1)]
    assert [p["mean"] for p in curves["columns"]["lmeval"]] == [sum(RUNS[1][s]) / N for s in (50, 100)]


def test_the_prompt_and_instruction_level_figure_is_left_out_of_an_lmeval_report(tmp_path):
    from ifdistill.results.plots import draw_ifeval_vs_step

    assert draw_ifeval_vs_step(_report(tmp_path)) is None
