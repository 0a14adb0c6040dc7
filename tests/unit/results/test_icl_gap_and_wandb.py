"""ICL gap from two evaluator outputs (known vectors), and the W&B upload read back offline."""

from __future__ import annotations

import math

import pytest

from ifdistill.results import icl_gap
from ifdistill.cli.report import main, write_report
from ifdistill.results.report import ReportOptions

from tests.unit.results.result_files import simple_rows, write_eval_dir, write_scenario


def test_icl_gap_of_known_vectors(tmp_path):
    # 541 prompts as in ../shared/context.md: 39 pass 0-shot, 46 pass 4-shot; 9 gained, 2 lost.
    zero = [i < 39 for i in range(541)]
    four = [i < 37 or 100 <= i < 109 for i in range(541)]
    assert sum(four) == 46
    write_eval_dir(tmp_path / "k0", simple_rows(zero), k=0)
    write_eval_dir(tmp_path / "k4", simple_rows(four), k=4)
    gap = icl_gap.icl_gap(tmp_path / "k0", tmp_path / "k4", n_resamples=1000)
    assert gap["zero_shot"]["k"] == 0 and gap["k_shot"]["k"] == 4
    assert gap["config_differences"] == ["eval.fewshot.k", "output_dir"] and gap["unexpected_differences"] == []
    assert gap["same_model"] and gap["zero_shot"]["eval_config_hash"] != gap["k_shot"]["eval_config_hash"]
    m = gap["gap"]["metrics"]["prompt_level_strict_acc"]
    assert m["delta"] == pytest.approx(7 / 541)
    t = gap["gap"]["mcnemar"]["strict"]
    # 2 * (C(11,0) + C(11,1) + C(11,2)) / 2^11
    assert (t["gained"], t["lost"]) == (9, 2) and t["p_value"] == pytest.approx(2 * (1 + 11 + 55) / 2**11)
    # d: +1 x9, -1 x2 -> sum (d - 7/541)^2 = 11 - 541 * (7/541)^2
    assert m["se"] == pytest.approx(math.sqrt((11 - 49 / 541) / 540 / 541))
    assert m["within_2se"] == (7 / 541 < 2 * m["se"])
    files = icl_gap.write(gap, tmp_path / "out")
    md = files[1].read_text()
    assert "| prompt strict | 7.21 ±" in md and "8.50 ±" in md and "9 prompts gained" in md


def test_icl_gap_warns_about_other_config_differences(tmp_path, capsys):
    write_eval_dir(tmp_path / "a", simple_rows([True, False] * 5), k=0)
    write_eval_dir(tmp_path / "b", simple_rows([True] * 10), k=4, model_path="/other",
                   eval_overrides={"generation.max_new_tokens": 512})
    assert main(["icl-gap", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "o"),
                 "--bootstrap-resamples", "100"]) == 0
    printed = capsys.readouterr().out
    assert "differ in `eval.generation.max_new_tokens`" in printed and "different models" in printed


def test_wandb_upload_offline_has_tables_and_images(tmp_path, monkeypatch):
    import wandb

    from ifdistill.results import page_render
    from ifdistill.tracking.wandb_offline import find_run_dirs, load_table, read_run

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    dirs = write_scenario(tmp_path / "s", n_prompts=40)
    try:
        out = write_report([tmp_path / "s" / "sweep"], tmp_path / "report", base_model=dirs["base"],
                           options=ReportOptions(n_resamples=100), wandb=True,
                           wandb_kwargs={"project": "t", "mode": "offline"})
    finally:
        wandb.teardown()
    (run_dir,) = find_run_dirs(tmp_path / "report")
    run = read_run(run_dir)
    assert run["id"] == out["wandb"]["id"] and run["exit_code"] == 0
    logged = {k: v for row in run["history"] for k, v in row.items()}
    table = load_table(run, logged["report/runs"])
    assert table["columns"][0] == "name" and [r[0] for r in table["data"]] == ["base", "distill_s1", "sft_s1", "sft_s2"]
    assert {"report/deltas", "report/per_instruction_type", "report/seed_groups"} <= set(logged)
    header, rows = page_render.results_table(out["report"]["page"])  # the results page, cell for cell
    page = load_table(run, logged["report/page"])
    assert page["columns"] == header and page["data"] == rows and page["data"][0][0] == "base"
    for stem in ("ifeval_vs_step", "tf_vs_ifeval", "per_type_heatmap", "tradeoff", "format_vs_task"):
        assert logged[f"report/{stem}"]["_type"] == "image-file"
    assert run["summary"]["baseline"] == "base"
