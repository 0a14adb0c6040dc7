"""Rows per second of ifdistill's IFEval scorer against the lm-eval oracle, in one process.

    .venv/bin/python bench/bench_scorer.py [--repeats 3] [--profile]

Two row sets: google's 541 prompts with GPT-4's published responses (long, real answers), and the
boundary cases of :mod:`tests.parity.ifeval_boundary_cases` (a few thousand short, adversarial ones).
For each set both implementations score every row strict and loose; imports and one-time loading
(nltk, punkt_tab, langdetect profiles, lm-eval's modules) happen in a warm-up before any timing.
ifdistill's memo caches are cleared before each of its timed runs, so every run starts cold and
only reuses work within the run, as a single ``ifdistill-score`` invocation would. The runs of the
two implementations alternate, and the median of ``--repeats`` runs is reported, because the
machine may be shared. ``--profile`` prints the top of a cProfile of one ifdistill run per set.

ifdistill is timed through :func:`ifdistill.benchmarks.instruction_following.scoring.score_rows` (validation + scoring, what
the CLI does between reading and writing the files); the oracle through lm-eval's
``test_instruction_following_strict`` and ``..._loose`` with langdetect seeded.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the oracles live in tests/parity

from ifdistill.benchmarks.instruction_following.scoring import clear_caches, score_rows  # noqa: E402
from tests.parity import ifeval_boundary_cases as boundary_cases  # noqa: E402
from tests.parity.ifeval_oracle import load_oracle  # noqa: E402
from tests.parity.ifeval_reference_data import load_gpt4_rows  # noqa: E402


def _warm_up(oracle) -> None:
    """Load everything lazily loaded (nltk, punkt, langdetect, lm-eval) on a few cheap rows."""
    warm = [
        {"prompt": "p", "instruction_id_list": ids, "kwargs": kw, "response": "Hello there. HI! ok"}
        for ids, kw in (
            (["length_constraints:number_sentences"], [{"num_sentences": 1, "relation": "at least"}]),
            (["change_case:capital_word_frequency"], [{"capital_frequency": 1, "capital_relation": "at least"}]),
            (["language:response_language"], [{"language": "en"}]),
        )
    ]
    score_rows(warm)
    for row in warm:
        oracle.score(row["prompt"], row["instruction_id_list"], row["kwargs"], row["response"])


def _time(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench(
    name: str,
    rows: list[dict[str, Any]],
    oracle,
    repeats: int,
    profile: bool,
    oracle_name: str = "lm-eval",
) -> dict[str, float]:
    """Median rows/s of ``score_rows`` and of ``oracle.score`` row by row, alternating, ours cold.

    Shared with ``bench_ifbench_scorer.py``; ``oracle`` is any object with ifdistill's
    ``score(prompt, instruction_id_list, kwargs, response)`` signature.
    """

    def ours() -> None:
        score_rows(rows)

    def reference() -> None:
        for row in rows:
            oracle.score(row["prompt"], row["instruction_id_list"], row["kwargs"], row["response"])

    ours_s, ref_s = [], []
    for _ in range(repeats):
        clear_caches()
        ours_s.append(_time(ours))
        ref_s.append(_time(reference))
    n = len(rows)
    result = {
        "rows": n,
        "ifdistill_rows_per_s": n / statistics.median(ours_s),
        "oracle_rows_per_s": n / statistics.median(ref_s),
    }
    result["ratio"] = result["ifdistill_rows_per_s"] / result["oracle_rows_per_s"]
    print(
        f"{name:<16} rows={n:<5} ifdistill {result['ifdistill_rows_per_s']:8.0f} rows/s   "
        f"{oracle_name} {result['oracle_rows_per_s']:7.0f} rows/s   ratio {result['ratio']:.2f}x   "
        f"(runs, s: ours {', '.join(f'{t:.2f}' for t in ours_s)}; "
        f"oracle {', '.join(f'{t:.2f}' for t in ref_s)})"
    )
    if profile:
        clear_caches()
        prof = cProfile.Profile()
        prof.runcall(ours)
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())
    return result


def parse_args(argv: list[str] | None, doc: str) -> argparse.Namespace:
    """``--repeats``, ``--profile`` and ``--seed``, shared with ``bench_ifbench_scorer.py``."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--seed", type=int, default=0, help="seed of the boundary cases")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__)

    oracle = load_oracle()
    _warm_up(oracle)
    sets = {
        "gpt4 (541)": load_gpt4_rows(),
        "boundary cases": boundary_cases.generate(seed=args.seed),
    }
    results = {name: bench(name, rows, oracle, args.repeats, args.profile) for name, rows in sets.items()}
    worst = min(r["ratio"] for r in results.values())
    print(f"minimum ratio {worst:.2f}x (goal >= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
