"""``make demo``'s closing table pairs its deltas per prompt: metrics.json records each evaluation's
``results_dir`` relative to the run directory (``evals/step_000040``), and the table reads the two
samples.jsonl files from there wherever the demo runs. The expected Δ, standard error and MDE are computed
here from the two samples.jsonl files (the README's run: 32 prompts, 2 passed by the base, 6 at step 40,
4 gained and none lost)."""

from __future__ import annotations

import json
import math
import statistics
from statistics import NormalDist

from ifdistill.cli import demo
from ifdistill.results import run_metrics

from tests.unit.results.result_files import sample, write_run_dir

N = 32
COLUMNS = ["prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc"]


def _rows(passed: int) -> list[dict]:
    """Prompt i follows both of its instructions when i < passed, else only the first."""
    return [sample(str(1000 + i), f"prompt {i}", f"response {i}", ["punctuation:no_comma", "change_case:english_lowercase"],
                   [{}, {}], [True, i < passed], [True, i < passed]) for i in range(N)]


def test_the_demo_table_delta_is_paired_from_the_samples(tmp_path, monkeypatch):
    run_dir = write_run_dir(tmp_path / "run", run_id="demo_smollm2-x", seed=42, config={"lr": 2e-4},
                            checkpoints={0: _rows(2), 40: _rows(6)}, method="sft")
    checkpoints = run_metrics.read(run_dir)["checkpoints"]
    assert checkpoints["40"]["results_dir"] == "evals/step_000040"  # relative, as the callback records it
    monkeypatch.chdir(tmp_path)  # the demo runs from the repository, not from the run directory

    lines = demo.table([("0 (base)", checkpoints["0"]), ("40", checkpoints["40"])], checkpoints["0"], "ifeval",
                       COLUMNS, run_dir)

    def strict(step):
        path = run_dir / "evals" / f"step_{step:06d}" / "samples.jsonl"
        return [float(json.loads(line)["strict_prompt"]) for line in path.read_text().splitlines()]

    d = [a - b for a, b in zip(strict(40), strict(0))]
    delta, se = statistics.mean(d), statistics.stdev(d) / math.sqrt(N)  # 0.125, 0.0594 (unpaired: 0.082)
    mde = (2 + NormalDist().inv_cdf(0.8)) * se
    assert lines[0].endswith("| Δ prompt strict vs base | MDE | verdict |")
    cells = [c.strip() for c in lines[3].strip("|").split("|")]
    assert cells[5:7] == [f"{100 * delta:+.1f} ± {100 * se:.1f}", f"{100 * mde:.1f}"]  # "+12.5 ± 5.9", "16.9"
    # 12.5 >= 2 x 5.94: a gain, and no other column down (every row of this run gains or holds)
    assert delta >= 2 * se and cells[7] == "wins"
    assert lines[2].endswith("| - | - | (base) |")
