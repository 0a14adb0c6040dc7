"""Learning and forgetting on the results page: the trade-off, format vs task, rank reversals.

:func:`build_forgetting` computes the three analyses of a sweep from the page (its columns, gain
column, eval config per column and noise threshold) and the loaded runs; :func:`write_forgetting`
draws the figures into the report's directory (``--wandb`` uploads every PNG there) and returns the
Markdown lines and the HTML section of report.md / report.html. What each number means:
:mod:`ifdistill.results.tradeoff` (trade-off points, rank reversal) and
:mod:`ifdistill.results.format_task` (format vs task, and the rule of the "format before task" note).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ifdistill.results.format_task import SATURATION, format_task
from ifdistill.results.page import Samples, page_rows
from ifdistill.results.page_render import _html_table
from ifdistill.results.runs import Run
from ifdistill.results.tables import markdown_table, num, signed
from ifdistill.results.tradeoff import rank_reversals, tradeoff_points

TRADEOFF_PNG, FORMAT_TASK_PNG = "tradeoff.png", "format_vs_task.png"
REVERSAL_HEADER = ["column", "step", "ahead at step", "Δ at step", "ahead at final", "Δ at final"]


def build_forgetting(page: dict, runs: Sequence[Run], base: Sequence[Path] | None, *,
                     per_checkpoint: bool = False) -> dict[str, Any]:
    """``{tradeoff: {points}, format_task: {...}, reversal: {rankings, reversals}, noise_se, per_checkpoint}``."""
    rows = page_rows(runs, base)
    samples = Samples()
    return {"noise_se": page["options"]["noise_se"], "per_checkpoint": per_checkpoint,
            "tradeoff": {"points": tradeoff_points(page, rows, samples, per_checkpoint=per_checkpoint)},
            "format_task": format_task(page, rows),
            "reversal": rank_reversals(page, rows, samples)}


def reversal_rows(forgetting: dict[str, Any]) -> list[list[str]]:
    return [[r["column"], num(r["step"]), r["ahead_at_step"], signed(r["delta_at_step"], r["se_at_step"]),
             r["ahead_at_final"], signed(r["delta_at_final"], r["se_at_final"])]
            for r in forgetting["reversal"]["reversals"]]


def tradeoff_rows(forgetting: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["run", "step", "method", "replay ratio", "gain", "worst change", "worst column", "drift (nats)",
              "verdict"]
    rows = [[p["run"], num(p["step"]), str(p["method"]), str(p["replay_ratio"]), signed(p["gain"], p["gain_se"]),
             signed(p["worst"], p["worst_se"]) if p["worst"] is not None else "—", p["worst_column"] or "—",
             f"{p['drift']:.4g}" if p["drift"] is not None else "—", p["verdict"]]
            for p in forgetting["tradeoff"]["points"]]
    return header, rows


def _rules(forgetting: dict[str, Any]) -> list[str]:
    k = forgetting["noise_se"]
    return [f"Rank reversal: a pair of runs ahead of each other at a step and at the final checkpoint, each time by "
            f"more than {k:g} standard errors of their paired difference.",
            f"Format before task: a format curve saturates at the first step reaching {SATURATION:.0%} of its rise "
            f"from step 0 (a rise beyond {k:g} se); a task curve rises at the first step above its step-0 value by "
            f"more than {k:g} se; noted when saturation comes first or the task curve never rises."]


def write_forgetting(forgetting: dict[str, Any], out_dir: Path) -> tuple[list[Path], list[str], str]:
    """The PNGs written into ``out_dir``, report.md's section and report.html's section."""
    from ifdistill.results.forgetting_plots import draw_format_task, draw_tradeoff
    from ifdistill.results.plots import DPI, plt

    figures: list[tuple[Path, str]] = []
    for drawn, name in ((draw_tradeoff(forgetting), TRADEOFF_PNG), (draw_format_task(forgetting), FORMAT_TASK_PNG)):
        if drawn is None:
            continue
        fig, caption = drawn
        fig.savefig(out_dir / name, dpi=DPI, bbox_inches="tight")
        plt.close(fig)
        figures.append((out_dir / name, caption))
    reversals, notes = reversal_rows(forgetting), forgetting["format_task"]["notes"]
    md = ["## Learning and forgetting", "", *[f"- {rule}" for rule in _rules(forgetting)], ""]
    header, rows = tradeoff_rows(forgetting)
    if rows:
        md += ["### Trade-off", "", *markdown_table(header, rows), ""]
    for path, caption in figures:
        md += [f"![{path.stem}]({path.name})", "", f"*{caption}*", ""]
    md += ["### Rank reversals", ""]
    md += [*markdown_table(REVERSAL_HEADER, reversals), ""] if reversals else ["No pair of runs reverses.", ""]
    if notes:
        md += ["### Format before task", "", *[f"- {n}" for n in notes], ""]
    return [p for p, _ in figures], md, _html(forgetting, figures, header, rows, reversals, notes)


def _html(forgetting: dict[str, Any], figures: Sequence[tuple[Path, str]], header: Sequence[str],
          rows: Sequence[Sequence[str]], reversals: Sequence[Sequence[str]], notes: Sequence[str]) -> str:
    import base64

    parts = ["<h2>Learning and forgetting</h2>",
             "<ul>" + "".join(f"<li>{html.escape(r)}</li>" for r in _rules(forgetting)) + "</ul>"]
    if rows:
        parts += ["<h3>Trade-off</h3>", _html_table(header, rows)]
    for path, caption in figures:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f'<figure><img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    parts.append("<h3>Rank reversals</h3>")
    parts.append(_html_table(REVERSAL_HEADER, reversals) if reversals else "<p>No pair of runs reverses.</p>")
    if notes:
        parts += ["<h3>Format before task</h3>", "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>"]
    return "".join(parts)
