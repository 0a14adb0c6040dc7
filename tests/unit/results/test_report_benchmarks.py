"""A report without ``--benchmark`` over rows of two benchmarks never pairs them: IFEval runs and an IFBench
evaluation (whose metrics have the same names) get columns of their own, and each row's deltas are against a
baseline of its own benchmark -- the runs against the IFEval base model, the IFBench evaluation against the
IFBench base model -- never across."""

from __future__ import annotations

import pytest

from ifdistill.cli.report import write_report

from tests.unit.results.page_tables import md_table
from tests.unit.results.result_files import simple_rows, write_eval_dir, write_run_dir

N = 20
#: prompts passing strict in each row's final evaluation
PASSING = {"base": 10, "base ifbench": 5, "s1": 12, "s2": 14, "ifbench_eval": 3}


def _rows(n_pass: int):
    return simple_rows([i < n_pass for i in range(N)])


def test_each_benchmark_gets_its_own_columns_and_baseline(tmp_path):
    for seed in (1, 2):
        write_run_dir(tmp_path / "sweep" / f"s{seed}", run_id=f"s{seed}", seed=seed, config={"lr": seed},
                      checkpoints={100: _rows(PASSING[f"s{seed}"])}, method="sft")
    ifbench = {"eval_overrides": {"benchmark": "ifbench"}}
    write_eval_dir(tmp_path / "other" / "ifbench_eval", _rows(PASSING["ifbench_eval"]), **ifbench)
    write_eval_dir(tmp_path / "base" / "ifeval", _rows(PASSING["base"]))
    write_eval_dir(tmp_path / "base" / "ifbench", _rows(PASSING["base ifbench"]), **ifbench)

    report = write_report([tmp_path / "sweep", tmp_path / "other"], tmp_path / "out",
                          base_model=tmp_path / "base")["report"]
    bench = {r["name"]: r["benchmark"] for r in report["runs"]}
    assert bench == {"base": "ifeval", "base ifbench": "ifbench", "s1": "ifeval", "s2": "ifeval",
                     "ifbench_eval": "ifbench"}
    columns = {c["metric"]: c for c in report["columns"]}
    strict = "prompt_level_strict_acc"
    assert columns[f"ifeval:{strict}"]["benchmark"] == "ifeval" and columns[f"ifbench:{strict}"]["benchmark"] == "ifbench"
    for row in report["runs"]:  # a row fills the columns of its own benchmark only
        assert {k.split(":")[0] for k in row["final"]} == {row["benchmark"]}
        assert row["final"][f"{row['benchmark']}:{strict}"] == sum(
            r["strict_prompt"] for r in _rows(PASSING[row["name"]])) / N
    pairs = {d["run"]: d["baseline"] for d in report["deltas"]}
    assert pairs == {"s1": "base", "s2": "base", "ifbench_eval": "base ifbench"}
    for d in report["deltas"]:
        assert {k.split(":")[0] for k in d["metrics"]} == {bench[d["run"]]}
        # run minus its own benchmark's base at prompt level: the difference of passing prompts over N (means
        # of 20 values in {-1, 0, 1}: exact to ~1e-15, so 1e-12)
        expected = (PASSING[d["run"]] - PASSING[d["baseline"]]) / N
        assert d["metrics"][f"{bench[d['run']]}:{strict}"]["delta"] == pytest.approx(expected, abs=1e-12)

    md = (tmp_path / "out" / "report.md").read_text()
    runs = md_table(md, "## Runs")
    header, body = runs[0], {r[0]: r for r in runs[1:]}
    assert body["base ifbench"][header.index("IFEval prompt strict")] == "–"
    assert body["s1"][header.index("IFBench prompt strict")] == "–"
    deltas = md_table(md, "## Deltas against each benchmark's baseline")
    d_header, d_body = deltas[0], {r[0]: r for r in deltas[1:]}
    assert d_body["ifbench_eval"][d_header.index("against")] == "base ifbench"
    assert d_body["ifbench_eval"][d_header.index("Δ IFEval prompt strict")] == "–"
