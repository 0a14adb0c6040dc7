"""The cross-benchmark results page from run directories with known per-document outcomes.

Every number on the page is checked against values this test derives from the outcomes it wrote
(means, standard errors, paired and unpaired deltas, flat marks, verdicts, reproducibility), and the
same table is read back from report.md, report.csv and report.html (html.parser).
"""

from __future__ import annotations

import csv
import math
import os
import statistics
from statistics import NormalDist

import pytest

from ifdistill.cli.report import main, write_report
from ifdistill.results.page import PageOptions, parse_column

from tests.unit.results.page_tables import chromium_dom, html_tables, md_table
from tests.unit.results.result_files import add_lmeval, simple_rows, write_eval_dir, write_lmeval_dir, write_run_dir

N_IF, N_LM = 100, 80
STEP = 100


def _flip(values, idx, to):
    out = list(values)
    for i in idx:
        out[i] = to
    return out


BASE_IF = [i % 2 == 0 for i in range(N_IF)]  # 50 % pass
BASE_GSM = [float(i % 5 < 2) for i in range(N_LM)]  # 40 %
BASE_CSQA = [float(i % 4 < 3) for i in range(N_LM)]  # 75 %
ODD_IF = list(range(1, N_IF, 2))  # prompts the base fails
GSM_PASS = [i for i in range(N_LM) if BASE_GSM[i]]
CSQA_PASS = [i for i in range(N_LM) if BASE_CSQA[i]]

# name -> (IFEval strict passes, gsm8k per document, commonsense_qa per document)
OUTCOMES = {
    "wins": (_flip(BASE_IF, ODD_IF[:20], True), _flip(BASE_GSM, GSM_PASS[:1], 0.0), BASE_CSQA),
    "forgetting": (_flip(BASE_IF, ODD_IF[:20], True), _flip(BASE_GSM, GSM_PASS[:25], 0.0), BASE_CSQA),
    "nogain": (_flip(BASE_IF, ODD_IF[:1], True), BASE_GSM, _flip(BASE_CSQA, CSQA_PASS[:2], 0.0)),
    "othercfg": (_flip(BASE_IF, ODD_IF[:20], True), BASE_GSM, BASE_CSQA),
}
RERUN_CSQA = _flip(BASE_CSQA, CSQA_PASS[:30], 0.0)  # a re-run of "wins" that does not reproduce
COLUMNS = ("IFEval prompt strict", "IFEval inst strict", "GSM8K strict", "CommonsenseQA")


def _tasks(gsm, csqa):
    return {"gsm8k": ("exact_match", "strict-match", gsm), "commonsense_qa": ("acc", "none", csqa)}


def _write_run(root, name, ifeval, gsm, csqa, *, lm_hash="lmeval-cfg", config_hash=None):
    run = write_run_dir(root / name, run_id=name, seed=1, config={"method": {"name": "sft"}, "lr": 1e-5},
                        checkpoints={STEP: simple_rows(ifeval)}, method="sft", config_hash=config_hash)
    add_lmeval(run, STEP, _tasks(gsm, csqa), eval_config_hash=lm_hash)
    return run


@pytest.fixture(scope="module")
def page_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("page")
    write_eval_dir(root / "base" / "ifeval", simple_rows(BASE_IF))
    write_lmeval_dir(root / "base" / "lmeval", _tasks(BASE_GSM, BASE_CSQA))
    rerun = _write_run(root / "other_root", "wins", OUTCOMES["wins"][0], OUTCOMES["wins"][1], RERUN_CSQA,
                       config_hash="cfg-wins")
    os.utime(rerun / "metrics.json", (1, 1))  # older: the re-run reported is the one under sweep/
    for name, (ifeval, gsm, csqa) in OUTCOMES.items():
        _write_run(root / "sweep", name, ifeval, gsm, csqa, lm_hash="other" if name == "othercfg" else "lmeval-cfg",
                   config_hash=f"cfg-{name}")
    (root / "sweep" / "nogain" / "evals" / "lmeval" / f"step_{STEP:06d}" / "samples.jsonl").unlink()  # unpaired
    out = write_report([root / "sweep", root / "other_root"], root / "report", base_model=root / "base")
    return root, out["report"]["page"]


def _se_mean(values):
    return statistics.stdev(values) / math.sqrt(len(values))


def _expected_cell(column, ifeval, gsm, csqa):
    """(value, se) from the outcomes: IFEval prompt level is binomial with n-1 (one instruction per
    prompt, so instruction level is the same); lm-eval's is the sample sd over sqrt(n)."""
    if column.startswith("IFEval"):
        p = sum(ifeval) / len(ifeval)
        return p, math.sqrt(p * (1 - p) / (len(ifeval) - 1))
    values = gsm if column == "GSM8K strict" else csqa
    return sum(values) / len(values), _se_mean(values)


def _expected_delta(column, run, base, paired=True):
    """(delta, se): paired per document (sd of the differences over sqrt(n)) or unpaired."""
    i = {"GSM8K strict": 1, "CommonsenseQA": 2}.get(column, 0)
    a, b = [float(x) for x in run[i]], [float(x) for x in base[i]]
    if paired:
        d = [x - y for x, y in zip(a, b)]
        return sum(d) / len(d), _se_mean(d) if any(d) else 0.0
    sa, sb = _expected_cell(column, *run)[1], _expected_cell(column, *base)[1]
    return sum(a) / len(a) - sum(b) / len(b), math.sqrt(sa ** 2 + sb ** 2)


BASE = (BASE_IF, BASE_GSM, BASE_CSQA)
TOL = 1e-12  # sums of at most 100 terms of 0/1 and their square roots: exact to ~1e-15
#: the MDE in standard errors: the 2-se rule finds an effect d with probability Phi(d / se - 2); 80 % at
#: d = (2 + z_0.8) se
MDE_SE = 2 + NormalDist().inv_cdf(0.8)


def test_cells_match_outcomes_and_gaps_are_explicit(page_dirs):
    _, page = page_dirs
    assert [c["label"] for c in page["columns"]] == list(COLUMNS)  # MMLU, TruthfulQA: no row has them
    assert any("MMLU" in n and "TruthfulQA mc2" in n for n in page["notes"])
    rows = {r["name"]: r for r in page["rows"]}
    assert list(rows)[0] == "base" and set(rows) == {"base", *OUTCOMES}
    for name, outcome in {"base": BASE, **OUTCOMES}.items():
        for col in COLUMNS:
            cell = rows[name]["cells"][col]
            value, se = _expected_cell(col, *outcome)
            assert cell["value"] == pytest.approx(value, abs=TOL) and cell["se"] == pytest.approx(se, abs=TOL)
    assert rows["othercfg"]["cells"]["GSM8K strict"]["mismatch"] and rows["othercfg"]["cells"]["CommonsenseQA"]["mismatch"]
    assert not rows["wins"]["cells"]["GSM8K strict"]["mismatch"]


def test_deltas_flat_marks_and_verdicts(page_dirs):
    _, page = page_dirs
    deltas = {d["row"]: d for d in page["deltas"]}
    assert all(d["reference"] == "base" for d in page["deltas"])
    seen_verdicts = set()
    for name, outcome in OUTCOMES.items():
        got = deltas[name]["columns"]
        expected = {}
        for col in COLUMNS:
            if name == "othercfg" and col in ("GSM8K strict", "CommonsenseQA"):
                assert got[col]["refused"] == "eval config differs"
                continue
            paired = not (name == "nogain" and col in ("GSM8K strict", "CommonsenseQA"))
            delta, se = _expected_delta(col, outcome, BASE, paired)
            assert got[col]["se_kind"] == ("paired" if paired else "unpaired")
            assert got[col]["delta"] == pytest.approx(delta, abs=TOL) and got[col]["se"] == pytest.approx(se, abs=TOL)
            assert got[col]["mde"] == pytest.approx(MDE_SE * se, abs=TOL)
            flat = delta == 0 or abs(delta) < 2 * se
            assert got[col]["flat"] == flat
            expected[col] = (delta, flat, se)
        # the lab's rule, applied here to the expected numbers; without a gain, the MDE against 5 points
        d, flat, se = expected["IFEval prompt strict"]
        gain = d > 0 and not flat
        down = [c for c, (x, f, _) in expected.items() if c != "IFEval prompt strict" and x < 0 and not f]
        untested = len(expected) < len(COLUMNS)
        powered = "underpowered" if 100 * MDE_SE * se > 5 else "no clear gain"
        verdict = ("forgetting" if down else "unverified gain" if untested else "wins") if gain else powered
        row = next(r for r in page["rows"] if r["name"] == name)
        assert row["verdict"]["verdict"] == verdict
        if not gain:
            assert row["verdict"]["note"] == f"could have detected >= {100 * MDE_SE * se:.1f} points"
        seen_verdicts.add(verdict)
    assert seen_verdicts == {"wins", "forgetting", "no clear gain", "unverified gain"}  # the scenario exercises every branch
    assert "untested: GSM8K strict, CommonsenseQA" in next(r for r in page["rows"] if r["name"] == "othercfg")["verdict"]["note"]


def test_reproducibility_flags_a_rerun_beyond_noise(page_dirs):
    root, page = page_dirs
    rows = {r["name"]: r for r in page["rows"]}
    rep = rows["wins"]["repro"]
    assert rep["status"] == "DIFFERS" and rep["n"] == 2
    assert [d["column"] for d in rep["differs"]] == ["CommonsenseQA"]
    delta, se = _expected_delta("CommonsenseQA", (None, None, OUTCOMES["wins"][2]), (None, None, RERUN_CSQA))
    assert rep["differs"][0]["delta"] == pytest.approx(delta, abs=TOL) and rep["differs"][0]["se"] == pytest.approx(se, abs=TOL)
    assert rows["forgetting"]["repro"] is None  # no re-run: nothing to check


def test_markdown_html_and_csv_show_the_same_numbers(page_dirs):
    root, page = page_dirs
    out = root / "report"
    md = (out / "report.md").read_text()
    table = md_table(md, "## Results page")
    header, body = table[0], {r[0]: r for r in table[1:]}
    for name, outcome in {"base": BASE, **OUTCOMES}.items():
        for col in COLUMNS:
            value, se = _expected_cell(col, *outcome)
            text = f"{100 * value:.2f} ± {100 * se:.2f}"
            cell = body[name][header.index(col)]
            assert cell == (text + " ‡" if name == "othercfg" and col in ("GSM8K strict", "CommonsenseQA") else text)
    assert body["wins"][header.index("verdict")] == "wins" and body["wins"][header.index("reproducibility")] == "DIFFERS (n=2)"
    deltas = md_table(md, "### Deltas")
    d = {r[0]: r for r in deltas[1:]}
    se = _expected_delta("GSM8K strict", OUTCOMES["nogain"], BASE, paired=False)[1]
    assert d["nogain"][deltas[0].index("Δ GSM8K strict")].endswith(f"~ (u, MDE {100 * MDE_SE * se:.2f})")
    assert d["othercfg"][deltas[0].index("Δ CommonsenseQA")] == "— (eval config differs)"
    page_html = (out / "report.html").read_text()
    assert "http://" not in page_html and "https://" not in page_html and "data:image/png;base64," in page_html
    tables = html_tables(page_html)
    assert tables[0] == table and tables[1] == deltas
    with open(out / "report.csv", newline="") as f:
        csv_rows = {r["name"]: r for r in csv.DictReader(f)}
    assert float(csv_rows["wins"]["page.GSM8K strict.value"]) == pytest.approx(_expected_cell("GSM8K strict", *OUTCOMES["wins"])[0])
    assert csv_rows["forgetting"]["page.verdict"] == "forgetting"


@pytest.mark.slow
def test_report_html_opens_in_headless_chromium(page_dirs, tmp_path):
    """A browser, not only a parser, reads report.html: Debian's chromium loads the file with the network
    off and its DOM holds the same results and deltas tables as report.md (.ci/run installs chromium)."""
    root, _ = page_dirs
    out = root / "report"
    md = (out / "report.md").read_text()
    dom = chromium_dom(out / "report.html", tmp_path / "profile")
    tables = html_tables(dom)
    assert tables[0] == md_table(md, "## Results page")
    assert tables[1] == md_table(md, "### Deltas")
    assert dom.count("<img") >= 1 and "data:image/png;base64," in dom


def test_columns_thresholds_and_bad_input(page_dirs, tmp_path, capsys):
    root, _ = page_dirs
    only = PageOptions(columns=(parse_column("IFEval prompt strict=ifeval:prompt_level_strict_acc"),
                                parse_column("mmlu/acc")), noise_se=100.0)
    page = write_report([root / "sweep"], tmp_path / "a", base_model=root / "base", page_options=only)["report"]["page"]
    rows = {r["name"]: r for r in page["rows"]}
    assert rows["wins"]["cells"]["mmlu/acc"] is None and any("no mmlu/acc" in n for n in page["notes"])
    # nothing beyond 100 se; the rule at 100 se detects only effects of (100 + z_0.8) se: over 5 points
    assert rows["wins"]["verdict"]["verdict"] == "underpowered"
    assert main([str(root / "sweep"), "-o", str(tmp_path / "b"), "--columns", "bogus:x"]) == 2
    assert "bogus:x" in capsys.readouterr().err and not (tmp_path / "b").exists()
    assert main([str(root / "sweep"), "-o", str(tmp_path / "c"), "--compare", "wins:nosuchrow"]) == 2
    assert "nosuchrow" in capsys.readouterr().err and not (tmp_path / "c").exists()
    # a named pair of rows: forgetting minus wins, paired per document
    assert main([str(root / "sweep"), "--base-model", str(root / "base"), "-o", str(tmp_path / "d"),
                 "--compare", "forgetting:wins", "--columns", "gsm8k/exact_match/strict-match"]) == 0
    deltas = md_table((tmp_path / "d" / "report.md").read_text(), "### Deltas")
    delta, se = _expected_delta("GSM8K strict", OUTCOMES["forgetting"], OUTCOMES["wins"])
    assert deltas[1][:2] == ["forgetting", "wins"] and len(deltas) == 2
    assert deltas[1][2] == f"{100 * delta:+.2f} ± {100 * se:.2f} (MDE {100 * MDE_SE * se:.2f})" and abs(delta) >= 2 * se


def test_sweep_curves_mean_and_se_over_seeds(tmp_path):
    """2 swept values x 2 seeds, evaluated at two steps: per group, column and step the mean over
    seeds and sd/sqrt(2), drawn as one PNG inline in report.html."""
    passes = {}  # (lr, seed, step) -> IFEval strict pass count out of 40
    for lr in (1e-5, 1e-4):
        for seed in (1, 2):
            run = tmp_path / "sweep" / f"lr{lr:g}_s{seed}"
            ifeval, gsm = {}, {}
            for step in (50, 100):
                k = 5 + round(1e5 * lr) + seed * 3 + step // 25  # at most 40
                passes[(lr, seed, step)] = k
                ifeval[step] = simple_rows([i < k for i in range(40)])
                gsm[step] = [float(i < 40 - k) for i in range(40)]
            write_run_dir(run, run_id=run.name, seed=seed, config={"method": {"name": "sft"}, "lr": lr},
                          checkpoints=ifeval, method="sft", config_hash=f"cfg-{run.name}")
            for step in (50, 100):
                add_lmeval(run, step, {"gsm8k": ("exact_match", "strict-match", gsm[step]),
                                       "commonsense_qa": ("acc", "none", [1.0, 0.0] * 20)})
    out = write_report([tmp_path / "sweep"], tmp_path / "report")
    page = out["report"]["page"]
    assert len(page["curves"]) == 2
    for g in page["curves"]:
        lr = 1e-5 if "1e-05" in g["label"] else 1e-4
        assert f"lr={lr:g}" in g["label"] and len(g["runs"]) == 2
        for col, value in (("IFEval prompt strict", lambda k: k / 40), ("GSM8K strict", lambda k: (40 - k) / 40)):
            pts = g["columns"][col]
            assert [p["step"] for p in pts] == [50, 100]
            for p in pts:
                v = [value(passes[(lr, s, p["step"])]) for s in (1, 2)]
                assert p["n"] == 2 and p["mean"] == pytest.approx(statistics.mean(v), abs=TOL)
                assert p["se"] == pytest.approx(statistics.stdev(v) / math.sqrt(2), abs=TOL)
    assert (tmp_path / "report" / "sweep_curves.png").is_file()
    assert "sweep_curves" in (tmp_path / "report" / "report.html").read_text()
