"""Writing the report dict as report.md (for people) and CSV files (for spreadsheets and scripts).

Markdown shows the report's columns (``report["columns"]``: the metrics its benchmarks report); a
benchmark's fractions in percent with two decimals (as the researchers' tables do) and their deltas in
percentage points, other values as they are; a delta under two standard errors is marked ``~``. The CSV files keep raw
fractions and every standard error, one row per run (``report.csv``), per run and instruction type
(``per_instruction_type.csv``) and per seed group (``seed_groups.csv``).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from ifdistill.benchmarks.base import short_name
from ifdistill.benchmarks.registry import get
from ifdistill.evaluator.output import MODES


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def pct(v: float | None, se: float | None = None) -> str:
    if _missing(v):
        return "–"
    return f"{100 * v:.2f}" if _missing(se) else f"{100 * v:.2f} ± {100 * se:.2f}"


def signed(delta: float | None, se: float | None = None, noise: bool | None = None) -> str:
    if _missing(delta):
        return "–"
    text = f"{100 * delta:+.2f}" + ("" if _missing(se) else f" ± {100 * se:.2f}")
    return text + (" ~" if noise else "")


def cell(column: dict, v: float | None, se: float | None = None) -> str:
    """A value of a report column: percent for a benchmark's fractions, else four decimals."""
    if column.get("fraction", True):
        return pct(v, se)
    return num(v) if _missing(se) else f"{num(v)} ± {num(se)}"


def delta_cell(column: dict, d: dict | None, mark_unpaired: bool = False) -> str:
    """A delta ``{delta, se, within_2se, mde}`` of a report column (percentage points for fractions), its
    minimum detectable effect beside it: ``+4.17 ± 4.20 ~ (MDE 11.93)``; ``mark_unpaired``: an unpaired
    one (``se_kind``) says so, ``(u, MDE 22.13)``."""
    if not d:
        return "–"
    fraction = column.get("fraction", True)
    if fraction:
        text = signed(d["delta"], d["se"], d["within_2se"])
    elif _missing(d["delta"]):
        return "–"
    else:
        text = f"{d['delta']:+.4f}" + ("" if _missing(d["se"]) else f" ± {d['se']:.4f}") + (" ~" if d["within_2se"] else "")
    tags = ["u"] if mark_unpaired and d.get("se_kind") == "unpaired" else []
    if not _missing(d.get("mde")) and not _missing(d["delta"]):
        tags.append(f"MDE {100 * d['mde']:.2f}" if fraction else f"MDE {d['mde']:.4f}")
    return text + (f" ({', '.join(tags)})" if tags else "")


def num(v: Any, digits: int = 4) -> str:
    if _missing(v):
        return "–"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def value(v: Any) -> str:
    """A config value: floats as written (``0.18``, ``1e-05``), everything else as str."""
    if _missing(v):
        return "–"
    return f"{v:g}" if isinstance(v, float) else str(v)


def p_value(p: float | None) -> str:
    """``p=0.031`` or ``p<0.001``."""
    if _missing(p):
        return "p=–"
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    cells = [[str(c).replace("|", "\\|") for c in row] for row in rows]
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
           ["| " + " | ".join(r) + " |" for r in cells]


def _image(name: str, alt: str, images: Collection[str]) -> list[str]:
    return [f"![{alt}]({name})", ""] if name in images else []


def _short_hash(h: str | None) -> str:
    return (h or "–")[:10]


def _runs_section(report: dict) -> list[str]:
    keys, columns = report["key_columns"], report["columns"]
    select = report["options"]["select_metric"]
    select_key = report.get("select_key", select)  # its column (a report of several benchmarks: <benchmark>:<metric>)
    chosen = next((c for c in columns if c["metric"] == select_key), {"metric": select_key})
    header = (["run", "method", *keys, "config_hash", "seed", "step"] + [c["label"] for c in columns]
              + ["best step", f"best {short_name(select)}", "TFA", "TFCE"])
    rows = []
    for r in report["runs"]:
        f, b = r["final"], r["best"]
        rows.append([r["name"], r["method"] or r["kind"], *[value(r["key_config"].get(k)) for k in keys],
                     _short_hash(r["config_hash"]), num(r["seed"]), num(r["final_step"])]
                    + [cell(c, f.get(c["metric"]), f.get(f"{c['metric']}_stderr")) for c in columns]
                    + [num(r["best_step"]), cell(chosen, b.get(select_key)), num(r["tfa"]), num(r["tfce"])])
    return ["## Runs", "", "Each metric ± standard error at the final checkpoint (fractions in percent); *best* is "
            f"the checkpoint with the best {short_name(select)} (selected on the evaluation "
            "prompts, so optimistic). TFA / TFCE: teacher-forced accuracy / cross-entropy at the final "
            "step.", "", *markdown_table(header, rows), ""]


def _deltas_section(report: dict) -> list[str]:
    if not report["deltas"]:
        return []
    conf = report["options"]["confidence"]
    columns = report["columns"]
    tested = any(d["mcnemar"] for d in report["deltas"])  # per-prompt decisions (McNemar, bootstrap)
    several = len({d["baseline"] for d in report["deltas"]}) > 1  # one baseline per benchmark
    header = (["run", *(["against"] if several else []), "step"] + [f"Δ {c['label']}" for c in columns] + ["se"]
              + ([f"McNemar {mode} (+/−, p)" for mode in MODES]
                 + [f"bootstrap {int(conf * 100)}% CI prompt {mode}" for mode in MODES] if tested else [])
              + ["eval config"])
    rows = []
    for d in report["deltas"]:
        ms = d["metrics"]
        row = [d["run"], *([d["baseline"]] if several else []), num(d["step"])]
        row += [delta_cell(c, ms.get(c["metric"])) for c in columns]
        row.append(f"paired (n={d['n_paired']})" if d["paired"] else "unpaired")
        for mode in MODES if tested else ():
            t = d["mcnemar"].get(mode)
            row.append(f"+{t['gained']}/−{t['lost']}, {p_value(t['p_value'])}" if t else "–")
        for mode in MODES if tested else ():
            b = d["bootstrap"].get(mode)
            row.append(f"[{100 * b['ci_low']:+.2f}, {100 * b['ci_high']:+.2f}]" if b else "–")
        row.append("same" if d["eval_config_match"] else "**differs**")
        rows.append(row)
    against = "each benchmark's baseline" if several else report["baseline"]
    return [f"## Deltas against {against}", "",
            f"Run minus {against} (fractions in percentage points) ± the standard error of the "
            "difference; `~` marks a difference under 2 standard errors (noise); MDE: the minimum detectable "
            "effect at 80 % power of that rule, (2 + 0.8416) x se. "
            + ("McNemar: prompts gained / lost and the exact two-sided p-value. " if tested else "")
            + "An eval config that differs from the baseline's makes the comparison unfair.", "",
            *markdown_table(header, rows), ""]


def _mean_sd(stats: dict) -> str:
    if not stats.get("n"):
        return "–"
    return num(stats["mean"]) if _missing(stats.get("sd")) else f"{num(stats['mean'])} ± {num(stats['sd'])}"


def _seed_section(report: dict) -> list[str]:
    groups = report["seed_groups"]
    if not groups:
        return []
    columns = report["columns"]
    header = ["group", "method", "n", "seeds"] + [f"{c['label']} mean ± sd" for c in columns] + ["TFA mean ± sd"]
    rows = []
    for g in groups:
        s = g["stats"]
        tfa = s.get("tfa", {})
        rows.append([g["group_hash"], g["method"] or "–", g["n"], ", ".join(num(x) for x in g["seeds"])]
                    + [cell(c, s[c["metric"]]["mean"], s[c["metric"]]["sd"]) for c in columns]
                    + [_mean_sd(tfa)])
    note = ("Runs whose configs are equal except for the seed (and paths/logging) share a group; "
            "sd is the sample standard deviation across seeds (nan for a single run).")
    return ["## Across seeds", "", note, "", *markdown_table(header, rows), ""]


def _display(report: dict, metric: str) -> str:
    """How people write the benchmark of a report column (the evaluation, when no column has ``metric``)."""
    name = next((c["benchmark"] for c in report["columns"] if c["metric"] == metric), None)
    return get(name).display if name else "the evaluation"


def _rankings_section(report: dict, images: Collection[str]) -> list[str]:
    rk = report["rankings"]
    if not rk["by_tfa"] and not rk["by_tfce"]:
        return []
    evaluation = _display(report, rk["metric"])
    lines = [f"## Teacher-forced metrics against {evaluation}", "",
             f"Teacher-forced accuracy and cross-entropy score imitation of one reference; {evaluation} scores "
             "the model's own outputs. They can rank runs differently.", "",
             f"- by {evaluation} ({short_name(rk['metric'])}, best first): {' > '.join(rk['by_ifeval'])}",
             f"- by TFA (higher first): {' > '.join(rk['by_tfa']) or '–'}",
             f"- by TFCE (lower first): {' > '.join(rk['by_tfce']) or '–'}"]
    for key, label in (("tfa_disagrees", "TFA"), ("tfce_disagrees", "TFCE")):
        pairs = rk[key]
        if pairs:
            lines.append(f"- {label} ranks against {evaluation} in {len(pairs)} pair(s): "
                         + "; ".join(f"{a} above {b}" for a, b in pairs))
    return lines + ["", *_image("tf_vs_ifeval.png", "TF metrics against IFEval", images)]


def _per_type_section(report: dict, images: Collection[str]) -> list[str]:
    pt = report["per_instruction_type"]
    if not pt["runs"]:
        return []
    names = list(pt["runs"])
    types = sorted({t for r in pt["runs"].values() for t in r})
    header = ["instruction type", "n", pt["reference"]] + [f"{n}: Δ (+gained/−forgotten)" for n in names]
    rows = []
    for t in types:
        first = next(pt["runs"][n][t] for n in names if t in pt["runs"][n])
        row = [t, num(first["count"]), pct(first["reference"])]
        for n in names:
            c = pt["runs"][n].get(t)
            if c is None:
                row.append("–")
                continue
            counts = f" (+{c['gained']}/−{c['forgotten']})" if c["gained"] is not None else ""
            row.append(signed(c["delta"], None, c["within_2se"]) + counts)
        rows.append(row)
    return [f"## Per instruction type ({pt['mode']}) against {pt['reference']}", "",
            f"Instruction-level {pt['mode']} accuracy of {pt['reference']} (percent) and each run's change "
            "in percentage points; gained = failed there and passed here, forgotten = the reverse. `~`: "
            "under 2 paired standard errors. With only a few instructions of a type (n below ~10) the "
            "2-standard-error rule is unreliable: read the gained/forgotten counts.", "", *markdown_table(header, rows), "",
            *_image("per_type_heatmap.png", "per-instruction-type heatmap", images)]


def _checkpoints_section(report: dict, images: Collection[str]) -> list[str]:
    lines = ["## Checkpoints", ""]
    for name, points in report["curves"].items():
        if len(points) < 2:  # a single evaluation is already a row of the runs table
            continue
        lines.append(f"### {name}")
        lines.append("")
        columns = report["columns"]
        rows = [[num(p["step"])] + [cell(c, p.get(c["metric"])) for c in columns] + [num(p["tfa"]), num(p["tfce"])]
                for p in points]
        lines += markdown_table(["step"] + [c["label"] for c in columns] + ["TFA", "TFCE"], rows) + [""]
    image = _image("ifeval_vs_step.png", "IFEval against step", images)
    return lines + image if len(lines) > 2 or image else []


def _failures_section(report: dict) -> list[str]:
    lines = []
    for r in report["runs"]:
        if r["missing_steps"]:
            lines.append(f"- {r['name']}: no result for step(s) {', '.join(map(str, r['missing_steps']))}")
    return ["## Missing evaluations", "", *lines, ""] if lines else []


def _warnings_section(report: dict) -> list[str]:
    notes = report.get("warnings") or []
    return ["## Warnings", "", *[f"- {n}" for n in notes], ""] if notes else []


def render_markdown(report: dict, images: Collection[str] = (), first: Sequence[str] = (),
                    title: str = "Report") -> str:
    """report.md; ``images`` are the PNG file names written next to it (linked where they belong);
    ``first``: lines shown before the per-run sections (the cross-benchmark results page)."""
    head = [f"# {title}", "",
            f"{len(report['runs'])} row(s); baseline for deltas: **{report['baseline']}**"
            + (f"; base model: **{report['base_model']}**" if report["base_model"] else "") + ".", "",
            report["standard_error"], ""]
    parts = (head + _warnings_section(report) + list(first) + _runs_section(report) + _deltas_section(report) + _seed_section(report)
             + _rankings_section(report, images) + _per_type_section(report, images)
             + _checkpoints_section(report, images)
             + _failures_section(report))
    return "\n".join(parts).rstrip() + "\n"


def _flat_run_row(run: dict, delta: dict | None, keys: Sequence[str]) -> dict[str, Any]:
    row = {k: run[k] for k in ("name", "kind", "method", "config_hash", "group_hash", "seed")}
    row.update({f"config.{k}": run["key_config"].get(k) for k in keys})
    row["final_step"] = run["final_step"]
    row.update({f"final.{k}": v for k, v in run["final"].items()})
    row["best_step"] = run["best_step"]
    row.update({f"best.{k}": v for k, v in run["best"].items()})
    row.update({k: run[k] for k in ("tfa", "tfa_step", "tfce", "tfce_step", "num_prompts", "eval_config_hash")})
    if delta is not None:
        for m, d in delta["metrics"].items():
            for field in ("delta", "se", "se_kind", "within_2se", "mde"):
                row[f"delta.{m}.{field}"] = d[field]
        for mode in MODES:
            for field in ("gained", "lost", "p_value"):
                row[f"mcnemar.{mode}.{field}"] = delta["mcnemar"].get(mode, {}).get(field)
            for field in ("ci_low", "ci_high"):
                row[f"bootstrap.{mode}.{field}"] = delta["bootstrap"].get(mode, {}).get(field)
    return row


PER_TYPE_COLUMNS = ["run", "reference", "mode", "instruction_type", "count", "reference_acc", "run_acc", "delta",
                    "se", "within_2se", "gained", "forgotten"]


def _write_csv(path: Path, rows: list[dict[str, Any]], columns: Sequence[str] = ()) -> None:
    columns = list(columns)
    for r in rows:
        columns += [k for k in r if k not in columns]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow({k: ("" if _missing(v) else v) for k, v in r.items()})


def write_csvs(report: dict, out_dir: Path, extra: dict[str, dict[str, Any]] | None = None) -> list[Path]:
    """report.csv (``extra``: more columns per run name, the results page's), per_instruction_type.csv
    and seed_groups.csv."""
    deltas = {d["run"]: d for d in report["deltas"]}
    runs = [{**_flat_run_row(r, deltas.get(r["name"]), report["key_columns"]), **(extra or {}).get(r["name"], {})}
            for r in report["runs"]]
    paths = [out_dir / "report.csv"]
    _write_csv(paths[0], runs)
    pt = report["per_instruction_type"]
    long = [{"run": n, "reference": pt["reference"], "mode": pt["mode"], "instruction_type": t,
             **{("reference_acc" if k == "reference" else "run_acc" if k == "run" else k): v
                for k, v in c.items()}}
            for n, types in pt["runs"].items() for t, c in types.items()]
    paths.append(out_dir / "per_instruction_type.csv")  # with the header alone when nothing compares
    _write_csv(paths[-1], long, PER_TYPE_COLUMNS)
    groups = [{"group_hash": g["group_hash"], "method": g["method"], "n": g["n"],
               "runs": " ".join(g["runs"]), "seeds": " ".join(str(s) for s in g["seeds"]),
               **{f"{m}.{k}": v for m, s in g["stats"].items() for k, v in s.items() if k != "n"}}
              for g in report["seed_groups"]]
    if groups:
        paths.append(out_dir / "seed_groups.csv")
        _write_csv(paths[-1], groups)
    return paths
