"""The report built from constructed runs: numbers, report.md, CSV, combined metrics.json, PNGs."""

from __future__ import annotations

import csv
import json

import pytest

from ifdistill.benchmarks.instruction_following.stats import mcnemar_exact
from ifdistill.evaluator import output as eval_output
from ifdistill.results import run_metrics, runs
from ifdistill.cli.report import main, write_report
from ifdistill.results.report import ReportOptions, build_report

from tests.unit.results.result_files import simple_rows, write_run_dir, write_scenario


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    root = tmp_path_factory.mktemp("scenario")
    dirs = write_scenario(root, n_prompts=150)
    out = write_report([root / "sweep"], root / "report", base_model=dirs["base"],
                       options=ReportOptions(n_resamples=500))
    return dirs, root / "report", out["report"]


def _strict(path):
    return {s.key: s.strict_prompt for s in eval_output.read_samples(path)}


def test_rows_final_best_and_training_metrics(scenario):
    _, _, report = scenario
    rows = {r["name"]: r for r in report["runs"]}
    assert list(rows) == ["base", "distill_s1", "sft_s1", "sft_s2"]
    assert report["baseline"] == "base" and report["base_model"] == "base"
    sft = rows["sft_s1"]
    assert sft["final_step"] == 1000 and sft["method"] == "sft" and sft["seed"] == 1
    assert sft["tfa"] == pytest.approx(0.55 + 0.08 + 0.002) and sft["tfce"] == pytest.approx(1.7)
    curve = report["curves"]["sft_s1"]
    best = max(curve, key=lambda p: (p["prompt_level_strict_acc"], -p["step"]))
    assert sft["best_step"] == best["step"]
    assert rows["base"]["kind"] == "eval" and rows["base"]["final_step"] is None


def test_deltas_against_base_match_tests_on_the_raw_vectors(scenario):
    dirs, _, report = scenario
    base = _strict(dirs["base"])
    for d in report["deltas"]:
        run = _strict(dirs[d["run"]] / "evals" / "step_001000")
        keys = sorted(base)
        expected = mcnemar_exact([base[k] for k in keys], [run[k] for k in keys])
        got = d["mcnemar"]["strict"]
        assert (got["gained"], got["lost"], got["p_value"]) == (expected["b01"], expected["b10"], expected["p_value"])
        m = d["metrics"]["prompt_level_strict_acc"]
        assert m["delta"] == pytest.approx(sum(run.values()) / len(run) - sum(base.values()) / len(base))
        assert m["se_kind"] == "paired" and m["within_2se"] == (abs(m["delta"]) < 2 * m["se"])
        b = d["bootstrap"]["strict"]
        assert b["ci_low"] <= m["delta"] <= b["ci_high"]


def test_seed_groups_rankings_and_forgetting(scenario):
    _, _, report = scenario
    sft = next(g for g in report["seed_groups"] if g["method"] == "sft")
    assert sft["runs"] == ["sft_s1", "sft_s2"] and sft["seeds"] == [1, 2]
    finals = {r["name"]: r["final"]["prompt_level_strict_acc"] for r in report["runs"]}
    assert sft["stats"]["prompt_level_strict_acc"]["mean"] == pytest.approx((finals["sft_s1"] + finals["sft_s2"]) / 2)
    # distillation imitates better (TFA) but scores lower on IFEval: the discrepancy is reported
    rk = report["rankings"]
    assert rk["by_tfa"][0] == "distill_s1" and rk["by_ifeval"][-1] == "distill_s1"
    assert ["distill_s1", "sft_s1"] in rk["tfa_disagrees"] and ["distill_s1", "sft_s1"] in rk["tfce_disagrees"]
    forgot = report["per_instruction_type"]["runs"]["distill_s1"]["detectable_format:json_format"]
    assert forgot["delta"] < 0 and forgot["forgotten"] > 0 and forgot["gained"] == 0 and not forgot["within_2se"]
    assert report["per_instruction_type"]["runs"]["sft_s1"]["detectable_format:json_format"]["delta"] > 0


def test_report_md_csv_and_combined_json(scenario):
    _, out, report = scenario
    md = (out / "report.md").read_text()
    for heading in ("## Runs", "## Deltas against base", "## Across seeds", "## Teacher-forced metrics against IFEval",
                    "## Per instruction type (strict) against base", "## Checkpoints"):
        assert heading in md
    for png in ("ifeval_vs_step.png", "tf_vs_ifeval.png", "per_type_heatmap.png"):
        assert f"]({png})" in md
    sft = next(r for r in report["runs"] if r["name"] == "sft_s1")
    f = sft["final"]
    assert (f"| sft_s1 | sft | 0.18 | cfg-sft_s1 | 1 | 1000 | "
            f"{100 * f['prompt_level_strict_acc']:.2f} ± {100 * f['prompt_level_strict_acc_stderr']:.2f} |") in md
    assert "paired standard error" in md and "TFA ranks against IFEval" in md

    with open(out / "report.csv", newline="") as fh:
        rows = {r["name"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"base", "distill_s1", "sft_s1", "sft_s2"}
    assert float(rows["sft_s1"]["final.prompt_level_strict_acc"]) == pytest.approx(f["prompt_level_strict_acc"])
    assert rows["base"]["delta.prompt_level_strict_acc.delta"] == ""  # the baseline has no delta
    d = next(x for x in report["deltas"] if x["run"] == "sft_s1")
    assert int(rows["sft_s1"]["mcnemar.strict.gained"]) == d["mcnemar"]["strict"]["gained"]
    assert rows["sft_s1"]["delta.inst_level_loose_acc.se_kind"] == "paired"
    assert (out / "per_instruction_type.csv").is_file() and (out / "seed_groups.csv").is_file()

    combined = json.loads((out / "metrics.json").read_text())
    assert combined["baseline"] == "base" and len(combined["runs"]) == 4
    assert "NaN" not in (out / "metrics.json").read_text()


def test_plots_render_as_pngs(scenario):
    import matplotlib.image as mpimg

    _, out, _ = scenario
    for name, min_width in (("ifeval_vs_step.png", 1200), ("tf_vs_ifeval.png", 1200), ("per_type_heatmap.png", 800)):
        image = mpimg.imread(out / name)
        assert image.shape[1] >= min_width and image.shape[0] >= 300
        assert image[..., :3].std() > 0.05  # not a blank canvas


def test_cli_baseline_by_name_and_without_base_model(scenario, tmp_path, capsys):
    dirs, _, _ = scenario
    sweep = dirs["sft_s1"].parent
    assert main([str(sweep), "--baseline", "sft_s1", "-o", str(tmp_path), "--bootstrap-resamples", "200",
                 "--checkpoint", "best"]) == 0
    assert "baseline sft_s1" in capsys.readouterr().out
    combined = json.loads((tmp_path / "metrics.json").read_text())
    assert {d["run"] for d in combined["deltas"]} == {"distill_s1", "sft_s2"}
    assert combined["options"]["checkpoint"] == "best"
    assert combined["per_instruction_type"]["reference"] == "sft_s1"  # no base model: the baseline
    md = (tmp_path / "report.md").read_text()
    assert "## Deltas against sft_s1" in md
    assert main([str(sweep), "--baseline", "nope", "-o", str(tmp_path)]) == 2
    assert "no run named or located at 'nope'" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2


def test_a_checkpoint_without_numbers_is_listed_as_missing(tmp_path):
    write_run_dir(tmp_path / "r", run_id="r", seed=0, config={"method": {"name": "sft"}},
                  checkpoints={100: simple_rows([True, False])})
    run_metrics.record_checkpoint(tmp_path / "r", 200, {"eval_config_hash": "h"}, "evals/gone", "backfill")
    run_metrics.record_failure(tmp_path / "r", 300, 2, "timeout", None, "", 0.0)
    run = runs.load_training_run(tmp_path / "r")
    assert [c.step for c in run.checkpoints] == [100]
    row = build_report([run])["runs"][0]
    assert row["final_step"] == 100 and row["missing_steps"] == [200, 300]
