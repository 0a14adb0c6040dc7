"""``ifdistill-score IN.jsonl -o OUT.jsonl [--skip-invalid]``: score a JSONL file of responses.

Rows may hold the ids of any instruction benchmark (IFEval's, IFBench's, M-IFEval's ``es:``/``fr:``/``ja:``), or a mix.

Each IN row needs ``prompt``, ``instruction_id_list``, ``kwargs`` and ``response``; other fields
(``key``, ``id``, ...) are kept. Each OUT row is the IN row (its keys in their input order) followed
by ``strict_inst``, ``loose_inst``, ``strict_prompt`` and ``loose_prompt``; OUT has the valid rows in
input order. The four aggregates are printed on stdout.

Reproducible output: rows are written with ``json.dumps(row, ensure_ascii=False)`` and its default
separators, one per line with ``"\\n"``, UTF-8, so repeated runs produce byte-identical files.

Errors: a bad row (bytes that are not UTF-8, unparsable JSON, missing field, unknown instruction id,
kwargs that do not fit the instruction, non-string response) stops the run with a message naming the
file, the 1-based line and the field, and exit status 2. With ``--skip-invalid`` such rows are left
out, each is reported on stderr, and their number is printed. Blank lines are ignored (but keep their
line numbers). Exit status 2 also for a missing input file and when no row could be scored. OUT is replaced only by a complete
result (written to a temp file, then renamed): after any error an existing OUT is left untouched.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ifdistill.benchmarks.instruction_following.instruction_base import InstructionError
from ifdistill.benchmarks.instruction_following.scoring import InvalidRowError, ScoredRows, score_numbered_rows
from ifdistill.benchmarks.instruction_following.stats import METRICS, aggregate
from ifdistill.data.sources import not_utf8, text_lines
from ifdistill.paths import atomic_write


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed row)``; a line that is not UTF-8 or not JSON yields an
    ``InstructionError`` instead (lines are decoded one by one, so the error names the line; a leading
    byte-order mark is accepted: :func:`ifdistill.data.sources.text_lines`)."""
    for line_no, line in text_lines(path):
        if isinstance(line, UnicodeDecodeError):
            yield line_no, InstructionError("<utf-8>", not_utf8(line))
            continue
        if not line.strip():
            continue
        try:
            yield line_no, json.loads(line)
        except json.JSONDecodeError as exc:
            yield line_no, InstructionError("<json>", f"not valid JSON: {exc}")


def dump_row(row: dict[str, Any]) -> str:
    """One output line; fixed settings so that identical rows give identical bytes."""
    return json.dumps(row, ensure_ascii=False) + "\n"


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write atomically (a temporary file renamed into place), so OUT is never half-written."""
    with atomic_write(path, "w", encoding="utf-8", newline="\n") as handle:
        for row in rows:
            handle.write(dump_row(row))


def format_aggregates(agg: dict[str, Any]) -> str:
    """One line per metric: value, standard error and followed/total, e.g.
    ``prompt_level_strict_acc  0.7708 +- 0.0181  (417/541)``."""
    lines = []
    for name in METRICS:
        total = agg["num_instructions"] if name.startswith("inst") else agg["num_prompts"]
        lines.append(
            f"{name:<24} {agg[name]:.4f} +- {agg[name + '_stderr']:.4f}  ({agg[name + '_count']}/{total})"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ifdistill-score",
        description="Score IFEval, IFBench and M-IFEval responses (strict and loose, as the references do) in a JSONL file.",
    )
    parser.add_argument(
        "input", type=Path, help="JSONL rows with prompt, instruction_id_list, kwargs, response"
    )
    parser.add_argument("-o", "--output", type=Path, required=True, help="JSONL file to write")
    parser.add_argument(
        "--skip-invalid",
        action="store_true",
        help="leave out rows that cannot be scored (reported on stderr) instead of failing",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.input.exists():
        print(f"ifdistill-score: error: no such file: {args.input}", file=sys.stderr)
        return 2
    try:
        result: ScoredRows = score_numbered_rows(
            read_jsonl(args.input), source=str(args.input), skip_invalid=args.skip_invalid
        )
    except InvalidRowError as exc:
        print(f"ifdistill-score: error: {exc}", file=sys.stderr)
        return 2
    for skipped in result.skipped:
        print(f"ifdistill-score: skipped {skipped.message}", file=sys.stderr)
    if result.skipped:
        print(f"skipped {len(result.skipped)} invalid row(s)")
    if not result.rows:
        print(f"ifdistill-score: error: no valid rows to score in {args.input}; {args.output} not written",
              file=sys.stderr)
        return 2
    try:
        write_jsonl(args.output, result.rows)
    except OSError as exc:
        print(f"ifdistill-score: error: cannot write {args.output}: {exc}", file=sys.stderr)
        return 1
    print(f"scored {len(result.rows)} row(s) -> {args.output}")
    print(format_aggregates(aggregate(result.rows)))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
