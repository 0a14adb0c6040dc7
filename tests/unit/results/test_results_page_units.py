"""A benchmark's units and direction on the results page, its deltas, ``ifdistill-status`` and the W&B view: a
benchmark of the test tree whose metric is a mean word count (not a fraction; fewer words is better) shows
``8.1000 ± 0.5000``, never ``810.00 ± 50.00``; its deltas stay in words; a row with fewer words than the base
*gains*; the view plots the count as logged and titles it lower-is-better."""

from __future__ import annotations

from statistics import NormalDist

import pytest

from ifdistill.benchmarks import registry
from ifdistill.benchmarks.base import Benchmark
from ifdistill.evaluator.results import publish
from ifdistill.results import run_metrics
from ifdistill.cli.report import write_report
from ifdistill.results.page import PageOptions, parse_column
from ifdistill.cli.status import format_table, run_status

from tests.unit.results.page_tables import md_table
from tests.unit.results.result_files import simple_rows, write_run_dir

WORDS = "test_words"
SE = 0.5
#: mean words of each run's final evaluation (and the base's); the IFEval rows are the same everywhere
RUNS = {"short": 8.1, "long": 12.0}
BASE = 10.0


class MeanWords(Benchmark):
    """Responses' mean word count: a count, and fewer is better."""

    name = WORDS
    display = "Words"
    fractions = False
    higher_is_better = False

    def headline_metrics(self, results):
        return ["mean_words"]

    def panel_metrics(self, section):
        return ["mean_words"]


@pytest.fixture()
def words_runs(tmp_path):
    registry.register(MeanWords())
    try:
        def words_eval(path, mean):
            results = {"schema_version": 1, "eval_config_hash": "words-cfg", "config": {"eval": {"benchmark": WORDS}},
                       "metrics": {"mean_words": mean, "mean_words_stderr": SE, "num_prompts": 20}}
            publish(path, results, [])
            return results

        for seed, (name, mean) in enumerate(RUNS.items()):
            run = write_run_dir(tmp_path / "sweep" / name, run_id=name, seed=seed, config={"lr": seed},
                                checkpoints={100: simple_rows([i < 10 for i in range(20)])}, method="sft")
            rel = "evals/words/step_000100"
            run_metrics.record_checkpoint(run, 100, words_eval(run / rel, mean), rel, "callback", benchmark="words")
        words_eval(tmp_path / "base" / "words", BASE)
        yield tmp_path
    finally:
        registry.unregister(WORDS)


def test_a_count_is_shown_in_its_unit_and_fewer_words_gain(words_runs):
    root = words_runs
    options = PageOptions(columns=(parse_column(f"Words={WORDS}:mean_words"),), gain_column="Words")
    write_report([root / "sweep"], root / "report", base_model=root / "base" / "words", benchmark="words",
                 page_options=options)
    md = (root / "report" / "report.md").read_text()
    table = md_table(md, "## Results page")
    header, body = table[0], {r[0]: r for r in table[1:]}
    col = header.index("Words")
    assert body["base"][col] == f"{BASE:.4f} ± {SE:.4f}"
    for name, mean in RUNS.items():
        assert body[name][col] == f"{mean:.4f} ± {SE:.4f}"
    # unpaired (no per-document values): delta = run - base, se = sqrt(2) * SE; MDE at 80 % power of the
    # 2-se rule (2 + z_0.8) se, in words too
    se = (2 * SE ** 2) ** 0.5
    mde = (2 + NormalDist().inv_cdf(0.8)) * se
    deltas = {r[0]: r for r in md_table(md, "### Deltas")[1:]}
    for name, mean in RUNS.items():
        assert deltas[name][2] == f"{mean - BASE:+.4f} ± {se:.4f} (u, MDE {mde:.4f})"
    verdict = header.index("verdict")
    assert body["short"][verdict] == "wins"  # 1.9 words fewer, beyond 2 se (1.41)
    # 2 words more is worse, never a gain; a count has no default target effect: no "underpowered" line
    assert body["long"][verdict] == f"no clear gain (could have detected >= {mde:.4g})"


def test_status_shows_the_count_as_it_is(words_runs):
    table = format_table([run_status(words_runs / "sweep" / "short")])
    assert f"mean_words {RUNS['short']:.4f}±{SE:.4f}" in table and "810" not in table


def test_the_wandb_view_plots_the_count_as_logged_and_says_fewer_is_better(words_runs):
    from ifdistill.cli.wandb_view import _benchmark_section  # the section view_spec builds per eval section

    section = _benchmark_section(WORDS, WORDS, registry.get(WORDS).panel_metrics({}))
    assert section == {"name": "Words", "panels": [{"type": "line", "title": f"{WORDS} mean words (lower is better)",
                                                    "x": f"{WORDS}/step", "y": [f"{WORDS}/mean_words"]}]}


MIXED = "test_mixed"
MIXED_RUNS = {"a": (0.5, 4.25), "b": (0.75, 6.5)}  # run -> (share of prompts kept short, mean words)


class ShortAndWords(registry.Benchmark):
    """A benchmark of fractions with one count among them: ``short`` a share of prompts, ``mean_words`` a count."""

    name = MIXED
    display = "Mixed"
    fractions = True

    def headline_metrics(self, results):
        return ["short", "mean_words"]

    def is_fraction(self, metric):
        return metric != "mean_words"


@pytest.fixture()
def mixed_runs(tmp_path):
    registry.register(ShortAndWords())
    try:
        def mixed_eval(path, short, words):
            results = {"schema_version": 1, "eval_config_hash": "mixed-cfg", "config": {"eval": {"benchmark": MIXED}},
                       "metrics": {"short": short, "short_stderr": 0.1, "mean_words": words, "mean_words_stderr": SE}}
            publish(path, results, [])
            return results

        for seed, (name, (short, words)) in enumerate(MIXED_RUNS.items()):
            run = write_run_dir(tmp_path / "sweep" / name, run_id=name, seed=seed, config={"lr": seed},
                                checkpoints={100: simple_rows([i < 10 for i in range(20)])}, method="sft")
            rel = "evals/mixed/step_000100"
            run_metrics.record_checkpoint(run, 100, mixed_eval(run / rel, short, words), rel, "callback",
                                          benchmark="mixed")
        mixed_eval(tmp_path / "zero", 0.25, 3.0)
        yield tmp_path
    finally:
        registry.unregister(MIXED)


def test_a_count_among_fractions_keeps_its_unit_in_every_table(mixed_runs, capsys):
    """Each metric's own is_fraction, not its benchmark's ``fractions``: mean words 4.25 is 4.2500, never
    425.00, in the report's runs table, ``ifdistill-report icl-gap`` and ``ifdistill-status``; the share
    next to it stays in percent."""
    from ifdistill.results import icl_gap
    from ifdistill.cli.report import main

    root = mixed_runs
    assert main([str(root / "sweep"), "--benchmark", "mixed", "-o", str(root / "report")]) == 0
    runs_table = md_table((root / "report" / "report.md").read_text(), "## Runs")
    header, body = runs_table[0], {r[0]: r for r in runs_table[1:]}
    for name, (short, words) in MIXED_RUNS.items():
        assert body[name][header.index("mean words")] == f"{words:.4f} ± {SE:.4f}"
        assert body[name][header.index("short")] == f"{100 * short:.2f} ± 10.00"
    gap = icl_gap.render_markdown(icl_gap.icl_gap(root / "zero", root / "sweep" / "a" / "evals" / "mixed" / "step_000100"))
    assert f"| mean words | 3.0000 ± {SE:.4f} | 4.2500 ± {SE:.4f} | +1.2500 ± " in gap
    assert "| short | 25.00 ± 10.00 | 50.00 ± 10.00 | +25.00 ± " in gap
    table = format_table([run_status(root / "sweep" / "a")])
    assert f"mean_words {MIXED_RUNS['a'][1]:.4f}±{SE:.4f}" in table and "425" not in table


def test_a_page_without_a_gain_column_says_there_are_no_verdicts(words_runs):
    """Only the words column, no gain column named: no verdicts, and the legend says why (never "a gain in
    None")."""
    root = words_runs
    options = PageOptions(columns=(parse_column(f"Words={WORDS}:mean_words"),))
    out = write_report([root / "sweep"], root / "report", base_model=root / "base" / "words", benchmark="words",
                       page_options=options)
    md = (root / "report" / "report.md").read_text()
    assert out["report"]["page"]["options"]["gain_column"] is None
    assert "No verdicts: no gain column" in md and "gain in None" not in md
    assert "gain in None" not in (root / "report" / "report.html").read_text()
