"""A benchmark's units and direction on the results page, its deltas, ``ifdistill-status`` and the W&B view: a
benchmark of the test tree whose metric is a mean word count (not a fraction; fewer words is better) shows
``8.1000 ± 0.5000``, never ``810.00 ± 50.00``; its deltas stay in words; a row with fewer words than the base
*gains*; the view plots the count as logged and titles it lower-is-better."""

from __future__ import annotations

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
    # unpaired (no per-document values): delta = run - base, se = sqrt(2) * SE
    deltas = {r[0]: r for r in md_table(md, "### Deltas")[1:]}
    for name, mean in RUNS.items():
        assert deltas[name][2] == f"{mean - BASE:+.4f} ± {(2 * SE ** 2) ** 0.5:.4f} (u)"
    verdict = header.index("verdict")
    assert body["short"][verdict] == "wins"  # 1.9 words fewer, beyond 2 se (1.41)
    assert body["long"][verdict] == "no clear gain"  # 2 words more is worse, never a gain


def test_status_shows_the_count_as_it_is(words_runs):
    table = format_table([run_status(words_runs / "sweep" / "short")])
    assert f"mean_words {RUNS['short']:.4f}±{SE:.4f}" in table and "810" not in table


def test_the_wandb_view_plots_the_count_as_logged_and_says_fewer_is_better(words_runs):
    from ifdistill.cli.wandb_view import _benchmark_section  # the section view_spec builds per eval section

    section = _benchmark_section(WORDS, WORDS, registry.get(WORDS).panel_metrics({}))
    assert section == {"name": "Words", "panels": [{"type": "line", "title": f"{WORDS} mean words (lower is better)",
                                                    "x": f"{WORDS}/step", "y": [f"{WORDS}/mean_words"]}]}
