"""``ifdistill-report`` inputs: runs without evaluations, argument errors, re-runs of one config, the
per-type CSV without a base model, and plots that stay readable with many runs."""

from __future__ import annotations

import csv
import json

import pytest

from ifdistill.checksum import seal
from ifdistill.results import runs
from ifdistill.cli.report import main, write_report
from ifdistill.results.report import ReportOptions, build_report

from tests.unit.results.result_files import simple_rows, write_eval_dir, write_run_dir

CONFIG = {"model": {"name_or_path": "builtin:tiny"}, "method": {"name": "sft", "lr": 1e-4}}
FAST = ["--bootstrap-resamples", "50"]


def _launched(run_dir, run_id: str, config_hash: str, when: str):
    """run.json as training writes it at a launch (ifdistill.runs.rundir)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "config_hash": config_hash, "hashed_config": CONFIG,
                                                  "launches": [{"time": when, "pid": 1, "host": "h"}]}))
    return run_dir


def test_a_run_without_evaluations_is_listed_with_a_warning(tmp_path, capsys):
    write_run_dir(tmp_path / "sweep" / "a", run_id="a", seed=1, config=CONFIG,
                  checkpoints={10: simple_rows([True, False, True])})
    _launched(tmp_path / "sweep" / "b", "b", "cfg-b", "2026-01-01T00:00:00+00:00")  # never evaluated
    out = tmp_path / "report"
    assert main([str(tmp_path / "sweep"), "-o", str(out), *FAST]) == 0
    err = capsys.readouterr().err
    assert f"warning: {tmp_path / 'sweep' / 'b'}: run b has no evaluation yet" in err
    combined = json.loads((out / "metrics.json").read_text())
    assert [r["name"] for r in combined["runs"]] == ["a", "b"] and combined["baseline"] == "a"
    assert combined["runs"][1]["final_step"] is None
    assert "## Warnings" in (out / "report.md").read_text() and "| b |" in (out / "report.md").read_text()
    # as the only run, or named as the baseline, it is an error -- before anything is written
    assert main([str(tmp_path / "sweep" / "b"), "-o", str(tmp_path / "none"), *FAST]) == 2
    assert main([str(tmp_path / "sweep"), "--baseline", "b", "-o", str(tmp_path / "none"), *FAST]) == 2
    assert "baseline b" in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_a_diverged_run_is_reported_with_a_warning(tmp_path, capsys):
    """A run that stopped on a non-finite value keeps its last finite checkpoint's numbers, and says so."""
    write_run_dir(tmp_path / "sweep" / "a", run_id="a", seed=1, config=CONFIG, checkpoints={10: simple_rows([True])})
    write_run_dir(tmp_path / "sweep" / "d", run_id="d", seed=2, config=CONFIG, checkpoints={10: simple_rows([False])})
    metrics = tmp_path / "sweep" / "d" / "metrics.json"
    data = {k: v for k, v in json.loads(metrics.read_text()).items() if k != "checksum"}
    data.update(state="diverged", divergence={"step": 13, "quantity": "loss", "policy": "stop", "checkpoint": 10})
    metrics.write_text(json.dumps(seal(data)))  # as training records it
    out = tmp_path / "report"
    assert main([str(tmp_path / "sweep"), "-o", str(out), *FAST]) == 0
    line = f"{tmp_path / 'sweep' / 'd'}: run d diverged at step 13 (loss not finite)"
    assert line in capsys.readouterr().err and line in (out / "report.md").read_text()
    assert "run a diverged" not in (out / "report.md").read_text()


@pytest.mark.parametrize("args", [["--baseline", "nope"], ["--base-model", "{tmp}/missing"], ["{tmp}/missing"]],
                         ids=["baseline", "base-model", "input"])
def test_argument_errors_leave_no_output_directory(tmp_path, args, capsys):
    write_run_dir(tmp_path / "sweep" / "a", run_id="a", seed=1, config=CONFIG, checkpoints={10: simple_rows([True])})
    out = tmp_path / "report"
    argv = [a.format(tmp=tmp_path) for a in args]
    inputs = [] if argv[0].startswith(str(tmp_path)) else [str(tmp_path / "sweep")]
    assert main([*inputs, *argv, "-o", str(out), *FAST]) == 2
    assert "ifdistill-report: error:" in capsys.readouterr().err
    assert not out.exists()


def test_reruns_of_one_config_are_one_run_the_latest(tmp_path, capsys):
    """The same command in two output roots: one config_hash, one seed -- one row, never two seeds."""
    for root, when, passes in (("old", "2026-01-01T00:00:00+00:00", [False] * 4),
                               ("new", "2026-02-01T00:00:00+00:00", [True] * 4)):
        run = write_run_dir(tmp_path / root / "runs" / "abc123", run_id="sft-abc123", seed=42, config=CONFIG,
                            checkpoints={20: simple_rows(passes)}, config_hash="abc123")
        _launched(run, "sft-abc123", "abc123", when)
    other = write_run_dir(tmp_path / "new" / "runs" / "def456", run_id="sft-def456", seed=43, config=CONFIG,
                          checkpoints={20: simple_rows([True, False, True, False])}, config_hash="def456")
    out = tmp_path / "report"
    assert main([str(tmp_path / "old"), str(tmp_path / "new"), "-o", str(out), *FAST]) == 0
    assert f"{tmp_path / 'old' / 'runs' / 'abc123'}: a re-run of config_hash abc123" in capsys.readouterr().err
    combined = json.loads((out / "metrics.json").read_text())
    rows = {r["name"]: r for r in combined["runs"]}
    assert set(rows) == {"sft-abc123", "sft-def456"} and rows["sft-abc123"]["final"]["prompt_level_strict_acc"] == 1.0
    assert rows["sft-abc123"]["path"] == str(tmp_path / "new" / "runs" / "abc123")
    groups = {tuple(g["seeds"]) for g in combined["seed_groups"]}
    assert groups == {(42, 43)}  # seeds 42 and 43 of one setup; the re-run is not a third "seed"
    assert other.exists()


def test_per_instruction_type_csv_is_written_without_a_base_model(tmp_path):
    for name, passes in (("a", [True, False, True, True]), ("b", [True, True, True, True])):
        write_run_dir(tmp_path / "sweep" / name, run_id=name, seed=1, config={**CONFIG, "x": name},
                      checkpoints={10: simple_rows(passes)})
    write_report([tmp_path / "sweep"], tmp_path / "two", options=ReportOptions(n_resamples=50))
    with open(tmp_path / "two" / "per_instruction_type.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["run"], r["reference"]) for r in rows] == [("b", "a")]  # against the baseline run
    assert float(rows[0]["delta"]) == pytest.approx(1.0 - 0.75)
    write_report([tmp_path / "sweep" / "a"], tmp_path / "one", options=ReportOptions(n_resamples=50))
    header = (tmp_path / "one" / "per_instruction_type.csv").read_text().splitlines()
    assert header == ["run,reference,mode,instruction_type,count,reference_acc,run_acc,delta,se,within_2se,gained,"
                      "forgotten"]  # nothing to compare with one run, but the file is there


def test_plots_tell_many_runs_apart_show_the_base_and_start_at_zero(tmp_path):
    from ifdistill.results.plots import draw_ifeval_vs_step, styles

    n = 14
    for i in range(n):
        write_run_dir(tmp_path / "sweep" / f"r{i:02d}", run_id=f"r{i:02d}", seed=i, config={**CONFIG, "i": i},
                      checkpoints={s: simple_rows([j < 60 + i + s // 10 for j in range(100)]) for s in (10, 20, 30)})
    base = runs.load_eval_dir(write_eval_dir(tmp_path / "base", simple_rows([j < 55 for j in range(100)])),
                              name="base", method="base")
    report = build_report(runs.load_all([tmp_path / "sweep"]), base, ReportOptions(n_resamples=20))
    style = styles(report)
    pairs = {(str(s["color"]), s["marker"]) for name, s in style.items() if name != "base"}
    assert len(pairs) == n  # every run its own colour/marker pair
    fig = draw_ifeval_vs_step(report)
    for ax in fig.axes:
        assert ax.get_ylim()[0] == 0
        points = [line for line in ax.get_lines() if line.get_label() == "base strict"]
        assert len(points) == 1 and list(points[0].get_xdata()) == [0] and points[0].get_marker() == "*"
        assert points[0].get_ydata()[0] == pytest.approx(55.0)  # one instruction per prompt: both levels
    fig.savefig(tmp_path / "many.png", dpi=100, bbox_inches="tight")
