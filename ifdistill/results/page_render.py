"""The results page (:func:`ifdistill.results.page.build_page`) as Markdown, CSV columns and a
self-contained HTML file.

Fractions in percent with two decimals ± standard error, deltas in percentage points (other metrics in
their own unit, :meth:`~ifdistill.benchmarks.base.Benchmark.is_fraction`); ``~`` marks a flat
delta (under the page's noise threshold), ``u`` an unpaired one, ``MDE`` its minimum detectable effect at 80 %
power (:mod:`ifdistill.results.power`), ``‡`` a cell evaluated with another
eval config than its column, ``—`` a gap (the notes say which). report.html holds the same tables and
every PNG inline as a base64 data URI, so it opens offline and can be published as one file.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from ifdistill.results.verdicts import verdict_text
from ifdistill.results.tables import cell as value_cell, delta_cell, markdown_table, num

GAP = "—"


def _short(h: str | None) -> str:
    return (h or GAP)[:10]


def _cell_text(cell: dict | None, column: dict) -> str:
    if cell is None:
        return GAP
    return value_cell(column, cell["value"], cell["se"]) + (" ‡" if cell["mismatch"] else "")


def _delta_text(d: dict, column: dict) -> str:
    if d.get("refused"):
        return GAP if d["refused"] == "missing" else f"{GAP} ({d['refused']})"
    return delta_cell(column, {**d, "within_2se": d["flat"]}, mark_unpaired=True)


def results_table(page: dict) -> tuple[list[str], list[list[str]]]:
    columns = page["columns"]
    labels = [c["label"] for c in columns]
    header = ["run", "method", "config_hash", "seed group", "seed", *labels, "verdict", "reproducibility"]
    rows = []
    for r in page["rows"]:
        v, rep = r["verdict"], r["repro"]
        verdict = GAP if v is None else verdict_text(v)
        repro = GAP if rep is None else f"{rep['status']} (n={rep['n']})"
        rows.append([r["name"], r["method"] or r["kind"], _short(r["config_hash"]), _short(r["seed_group"]),
                     num(r["seed"]), *[_cell_text(r["cells"][c["label"]], c) for c in columns], verdict, repro])
    return header, rows


def deltas_table(page: dict) -> tuple[list[str], list[list[str]]]:
    columns = page["columns"]
    header = ["run", "against", *[f"Δ {c['label']}" for c in columns]]
    rows = [[d["row"], d["reference"], *[_delta_text(d["columns"][c["label"]], c) for c in columns]]
            for d in page["deltas"]]
    return header, rows


def seed_groups_table(page: dict) -> tuple[list[str], list[list[str]]]:
    columns = page["columns"]
    header = ["seed group", "seeds", *[f"Δ {c['label']}" for c in columns], "verdict"]
    rows = [[g["label"], ", ".join(num(s) for s in g["seeds"]),
             *[_delta_text(g["columns"][c["label"]], c) for c in columns], verdict_text(g["verdict"])]
            for g in page.get("seed_groups") or []]
    return header, rows


def _legend(page: dict) -> str:
    options = page["options"]
    k, gain, target = options["noise_se"], options["gain_column"], options.get("target_effect")
    multiplier = options.get("mde_multiplier", k + 0.8416)
    if gain is None:
        rule = "No verdicts: no gain column (the page has no IFEval column; --gain-column names one). "
    else:
        fraction = next(c["fraction"] for c in page["columns"] if c["label"] == gain)
        without = (f"no clear gain when its MDE is at most the target effect, {target:g}{' points' if fraction else ''} "
                   "(it could have detected that), else underpowered (effects under its MDE are invisible here)"
                   if target is not None else "no clear gain, its MDE beside it (--target-effect sets the line to "
                   "underpowered)")
        rule = (f"Verdict against base: a gain in {gain} beyond {k:g} se and no other column worse beyond {k:g} se "
                "(each in its better direction) wins; the gain with a regression is forgetting, with a column "
                f"missing an unverified gain. Without a gain: {without}. ")
    return (f"Percent ± standard error at each run's final evaluation (a metric that is not a fraction in its own "
            f"unit, four decimals). Deltas in percentage points (own unit) ± the "
            f"standard error of the difference, paired per prompt/document where both sides have samples, "
            f"else unpaired (u); `~`: under {k:g} standard errors (flat). MDE: the minimum detectable effect at "
            f"80 % power of that rule, ({k:g} + 0.8416) x se = {multiplier:.4f} se. " + rule +
            "Seed groups: the group's mean against base, its se counting the spread across seeds as well as "
            "the prompts'. ‡: another eval config than the column's (never compared). —: no such evaluation.")


def render_markdown(page: dict, images: Collection[str] = ()) -> list[str]:
    """The page's section of report.md (its first section); ``images``: the PNG names written beside it."""
    lines = ["## Results page", "", _legend(page), "", *markdown_table(*results_table(page)), ""]
    if page["deltas"]:
        lines += ["### Deltas", "", *markdown_table(*deltas_table(page)), ""]
    if page.get("seed_groups"):
        lines += ["### Seed groups against base", "", *markdown_table(*seed_groups_table(page)), ""]
    differs = [(r["name"], d) for r in page["rows"] if r["repro"] for d in r["repro"]["differs"]]
    if differs:
        lines += ["### Reproducibility", "", "Re-runs (same config_hash, data manifest and seed) that differ "
                  "beyond noise:", ""]
        columns = {c["label"]: c for c in page["columns"]}
        lines += [f"- {name} vs {d['other']}: {d['column']} "
                  f"{delta_cell(columns[d['column']], {'delta': d['delta'], 'se': d['se'], 'within_2se': False})}"
                  for name, d in differs]
        lines.append("")
    if "sweep_curves.png" in images:
        lines += ["![every benchmark over steps](sweep_curves.png)", ""]
    if page["notes"]:
        lines += ["### Page notes", "", *[f"- {n}" for n in page["notes"]], ""]
    return lines


def csv_columns(page: dict) -> dict[str, dict[str, Any]]:
    """``{row name: {column: value}}`` to add to report.csv: every cell's value, se, step, eval config
    and mismatch, the delta against the first row, the verdict and the reproducibility status."""
    first = {d["row"]: d for d in page["deltas"]}
    out = {}
    for r in page["rows"]:
        row: dict[str, Any] = {"page.seed_group": r["seed_group"]}
        for c in page["columns"]:
            cell = r["cells"][c["label"]] or {}
            for field in ("value", "se", "step", "eval_config_hash", "mismatch"):
                row[f"page.{c['label']}.{field}"] = cell.get(field)
            d = first.get(r["name"], {}).get("columns", {}).get(c["label"], {})
            for field in ("delta", "se", "se_kind", "flat", "mde", "refused"):
                row[f"page.{c['label']}.delta_{field}"] = d.get(field)
        row["page.verdict"] = (r["verdict"] or {}).get("verdict")
        row["page.verdict_note"] = (r["verdict"] or {}).get("note")
        row["page.reproducibility"] = (r["repro"] or {}).get("status")
        out[r["name"]] = row
    return out


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
         "td,th{border:1px solid #999;padding:.25em .5em;text-align:right}td:first-child{text-align:left}"
         "img{max-width:100%}")


def render_html(page: dict, title: str, images: Sequence[Path] = (), sections: Sequence[str] = ()) -> str:
    """report.html: the page's tables, ``images`` (PNG files) inline and ``sections`` (HTML made by other
    analyses, e.g. :mod:`ifdistill.results.forgetting`) at the end; nothing loaded from elsewhere."""
    parts = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(_legend(page))}</p>",
             "<h2>Results</h2>", _html_table(*results_table(page))]
    if page["deltas"]:
        parts += ["<h2>Deltas</h2>", _html_table(*deltas_table(page))]
    if page.get("seed_groups"):
        parts += ["<h2>Seed groups against base</h2>", _html_table(*seed_groups_table(page))]
    if page["notes"]:
        parts += ["<h2>Notes</h2>", "<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in page["notes"]) + "</ul>"]
    for png in images:
        data = base64.b64encode(Path(png).read_bytes()).decode("ascii")
        parts.append(f'<figure><img alt="{html.escape(Path(png).stem)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{html.escape(Path(png).stem)}</figcaption></figure>")
    parts += list(sections)
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n")
