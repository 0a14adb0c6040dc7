"""Learning and forgetting on the page (trade-off, format vs task, rank reversal) from a sweep whose
per-document outcomes the test writes: every number is checked against values derived here.

The sweep: a base and four runs (method sft/distill x replay ratio 0/0.5), each evaluated at steps 2
and 4 on IFEval (60 prompts, one *format* instruction and one *content* instruction each) and on a
generative lm-eval task with a strict and a lenient filter (40 documents). Outcomes are index sets:
prompt ``i`` follows its format instruction iff ``i < F``, its content instruction iff ``i < C``;
document ``i`` is parsed by the strict filter iff ``i < P`` and right iff ``i < L`` (the strict filter
scores right only what it parsed).
"""

from __future__ import annotations

import math
import statistics

import pytest

from ifdistill.results import runs as runs_mod
from ifdistill.cli.report import write_report
from ifdistill.results.forgetting import build_forgetting
from ifdistill.results.page import PageOptions, parse_column

from tests.unit.results.result_files import sample, write_eval_dir, write_run_dir

N_IF, N_LM = 60, 40
FORMAT_ID, CONTENT_ID = "detectable_format:title", "keywords:existence"
LOOSE_FORMAT = 15  # loose also accepts the format instruction of prompts i < 15
TASK = "gsm8k_syn"
STRICT, LENIENT = "strict-match", "flexible-extract"
COLUMNS = ("IFEval prompt strict=ifeval:prompt_level_strict_acc", f"GSM8K strict=lmeval:{TASK}/exact_match/{STRICT}")
BASE = {"F": 10, "C": 10, "P": 10, "L": 8}
# run -> (method, replay ratio, {step: outcome}), drift at steps 2 and 4
RUNS = {
    "A": ("sft", 0.0, {2: {"F": 50, "C": 40, "P": 40, "L": 8}, 4: {"F": 50, "C": 20, "P": 40, "L": 2}}),
    "B": ("distill", 0.0, {2: {"F": 20, "C": 10, "P": 40, "L": 8}, 4: {"F": 55, "C": 55, "P": 40, "L": 20}}),
    "C": ("sft", 0.5, {2: {"F": 30, "C": 30, "P": 10, "L": 8}, 4: {"F": 40, "C": 40, "P": 10, "L": 8}}),
    "D": ("distill", 0.5, {2: {"F": 10, "C": 10, "P": 10, "L": 8}, 4: {"F": 10, "C": 10, "P": 10, "L": 8}}),
}
DRIFT = {"A": (0.01, 0.03), "B": (0.02, 0.05), "C": (0.004, 0.008), "D": (0.0, 0.001)}


def _ifeval_rows(o):
    return [sample(str(i), f"prompt {i}", f"response {i}", [FORMAT_ID, CONTENT_ID], [{}, {}],
                   [i < o["F"], i < o["C"]], [i < o["F"] or i < LOOSE_FORMAT, i < o["C"]]) for i in range(N_IF)]


def _lmeval(path, o):
    """A generative task with two filters through the evaluator's own lm-eval writers."""
    from ifdistill.benchmarks.lmeval import output
    from ifdistill.evaluator.results import publish

    values = {STRICT: [float(i < min(o["P"], o["L"])) for i in range(N_LM)],
              LENIENT: [float(i < o["L"]) for i in range(N_LM)]}
    samples = [{"doc_id": i, "doc_hash": f"h{i}", "arguments": [[f"q{i}", {"until": ["\n"]}]], "resps": [[f"a {i}"]],
                "filtered_resps": [str(i) if f == LENIENT or i < o["P"] else "[invalid]"], "target": str(i),
                "filter": f, "metrics": ["exact_match"], "exact_match": values[f][i]}
               for i in range(N_LM) for f in (STRICT, LENIENT)]
    res = {"results": {TASK: {f"exact_match,{f}": sum(v) / N_LM for f, v in values.items()}
                       | {f"exact_match_stderr,{f}": statistics.stdev(v) / N_LM ** 0.5 for f, v in values.items()}},
           "samples": {TASK: samples}}
    publish(path, {"schema_version": 1, "eval_config_hash": "lm-cfg", "metrics": output.metrics_of(res),
                   "config": {"eval": {"benchmark": "lmeval"}}}, output.sample_rows(res, [TASK]))
    return output.metrics_of(res)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    from ifdistill.results import run_metrics

    root = tmp_path_factory.mktemp("forgetting")
    write_eval_dir(root / "base" / "ifeval", _ifeval_rows(BASE))
    _lmeval(root / "base" / "lmeval", BASE)
    for name, (method, ratio, steps) in RUNS.items():
        config = {"method": {"name": method}, "data": {"ratio": ratio, "sources": [{"name": "syn"}]}}
        train = {s: {"val/syn/kl_base_model": d, "val/replay/kl_base_model": 9.0} for s, d in zip(steps, DRIFT[name])}
        run = write_run_dir(root / "sweep" / name, run_id=name, seed=1, config=config, method=method, train=train,
                            checkpoints={s: _ifeval_rows(o) for s, o in steps.items()}, config_hash=f"cfg-{name}")
        for step, o in steps.items():
            rel = f"evals/lmeval/step_{step:06d}"
            metrics = _lmeval(run / rel, o)
            run_metrics.record_checkpoint(run, step, {"eval_config_hash": "lm-cfg", "metrics": metrics,
                                                      "config": {"eval": {"benchmark": "lmeval"}}}, rel, "callback",
                                          benchmark="lmeval")
    options = PageOptions(columns=tuple(parse_column(c) for c in COLUMNS))
    out = write_report([root / "sweep"], root / "report", base_model=root / "base", page_options=options)
    return root, out["report"]


def _paired(a, b):
    """Mean of the per-item differences and its standard error (sample sd / sqrt(n))."""
    d = [x - y for x, y in zip(a, b)]
    return sum(d) / len(d), statistics.stdev(d) / math.sqrt(len(d))


def _prompt_strict(o):
    return [float(i < o["F"] and i < o["C"]) for i in range(N_IF)]


def _gsm_strict(o):
    return [float(i < min(o["P"], o["L"])) for i in range(N_LM)]


def test_tradeoff_points_are_the_paired_gain_and_worst_regression_against_the_base(sweep):
    _, report = sweep
    points = {p["run"]: p for p in report["forgetting"]["tradeoff"]["points"]}
    assert set(points) == set(RUNS) and all(p["step"] == 4 and p["final"] for p in points.values())
    expected_verdict = {"A": "forgetting", "B": "wins", "C": "wins", "D": "no clear gain"}
    for name, (method, ratio, steps) in RUNS.items():
        p, final = points[name], steps[4]
        gain, gain_se = _paired(_prompt_strict(final), _prompt_strict(BASE))
        worst, worst_se = _paired(_gsm_strict(final), _gsm_strict(BASE))
        # the page's statistics are sums of at most 60 terms of +-1/n: exact up to float64 rounding
        assert p["gain"] == pytest.approx(gain, abs=1e-12) and p["worst"] == pytest.approx(worst, abs=1e-12)
        if gain_se:
            assert p["gain_se"] == pytest.approx(gain_se, rel=1e-9)
        assert p["worst_se"] == pytest.approx(worst_se, rel=1e-9, abs=1e-12)
        assert (p["method"], p["replay_ratio"], p["worst_column"]) == (method, ratio, "GSM8K strict")
        assert p["drift"] == DRIFT[name][1]  # the new data's held-out set, not the replay one (9.0)
        assert p["verdict"] == expected_verdict[name], name


def test_per_checkpoint_points_cover_every_step(sweep):
    root, report = sweep
    runs = runs_mod.load_all([root / "sweep"])
    every = build_forgetting(report["page"], runs, [root / "base" / "ifeval", root / "base" / "lmeval"],
                             per_checkpoint=True)
    got = {(p["run"], p["step"]): p for p in every["tradeoff"]["points"]}
    assert set(got) == {(n, s) for n in RUNS for s in (2, 4)}
    for name, (_, _, steps) in RUNS.items():
        gain, _ = _paired(_prompt_strict(steps[2]), _prompt_strict(BASE))
        assert got[(name, 2)]["gain"] == pytest.approx(gain, abs=1e-12)
        assert got[(name, 2)]["drift"] == DRIFT[name][0] and not got[(name, 2)]["final"]


def test_format_and_task_numbers_and_the_format_before_task_notes(sweep):
    _, report = sweep
    ft = report["forgetting"]["format_task"]["runs"]
    if_series, lm_series = "IFEval: format vs content instructions", f"{TASK}: {STRICT} parse rate vs accuracy"
    for name, (_, _, steps) in RUNS.items():
        for step, o in [(0, BASE), *steps.items()]:
            point = next(p for p in ft[name][if_series]["points"] if p["step"] == step)
            strict, loose = _prompt_strict(o), [float((i < o["F"] or i < LOOSE_FORMAT) and i < o["C"]) for i in range(N_IF)]
            gap, gap_se = _paired(loose, strict)
            assert point["gap"] == pytest.approx(gap, abs=1e-12)
            assert point["gap_se"] == pytest.approx(gap_se, rel=1e-9, abs=1e-12)
            # one instruction per prompt and category: the clustered se is the binomial one with n - 1
            for category, bound in (("format", o["F"]), ("content", o["C"])):
                acc = bound / N_IF
                assert point[category] == pytest.approx(acc, abs=1e-12)
                assert point[f"{category}_se"] == pytest.approx(math.sqrt(acc * (1 - acc) / (N_IF - 1)), abs=1e-12)
            lm = next(p for p in ft[name][lm_series]["points"] if p["step"] == step)
            assert lm["parse_rate"] == pytest.approx(o["P"] / N_LM, abs=1e-12)
            assert lm["acc_lenient"] == pytest.approx(o["L"] / N_LM, abs=1e-12)
            assert lm["acc_strict"] == pytest.approx(min(o["P"], o["L"]) / N_LM, abs=1e-12)
    # A: parse rate 25 % -> 100 % at step 2, accuracy never above the base's; B: accuracy rises at step 4
    assert (ft["A"][lm_series]["saturates_at"], ft["A"][lm_series]["rises_at"]) == (2, None)
    assert (ft["B"][lm_series]["saturates_at"], ft["B"][lm_series]["rises_at"]) == (2, 4)
    noted = {(n, s) for n, per in ft.items() for s, c in per.items() if c["note"]}
    assert noted == {("A", lm_series), ("B", lm_series)}
    notes = report["forgetting"]["format_task"]["notes"]
    assert len(notes) == 2 and "A, " in notes[0] and "has not risen" in notes[0] and "rises at step 4" in notes[1]


def test_rank_reversals_are_the_pairs_that_flip_beyond_two_paired_standard_errors(sweep):
    root, report = sweep
    expected = set()
    for column, values in (("IFEval prompt strict", _prompt_strict), ("GSM8K strict", _gsm_strict)):
        names = sorted(RUNS)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                then = _paired(values(RUNS[a][2][2]), values(RUNS[b][2][2]))
                end = _paired(values(RUNS[a][2][4]), values(RUNS[b][2][4]))
                beyond = all(d != 0 and abs(d) >= 2 * se for d, se in (then, end))
                if beyond and (then[0] > 0) != (end[0] > 0):
                    expected.add((column, 2, a if then[0] > 0 else b, b if then[0] > 0 else a))
    got = {(r["column"], r["step"], r["ahead_at_step"], r["ahead_at_final"])
           for r in report["forgetting"]["reversal"]["reversals"]}
    assert got == expected == {("IFEval prompt strict", 2, "A", "B"), ("IFEval prompt strict", 2, "A", "C"),
                               ("IFEval prompt strict", 2, "C", "B")}
    rankings = report["forgetting"]["reversal"]["rankings"]["IFEval prompt strict"]
    assert rankings["2"][:2] == ["A", "C"] and rankings["final"] == ["B", "C", "A", "D"]
    md = (root / "report" / "report.md").read_text()
    assert "## Learning and forgetting" in md and "| IFEval prompt strict | 2 | A |" in md
    assert (root / "report" / "tradeoff.png").is_file() and (root / "report" / "format_vs_task.png").is_file()
