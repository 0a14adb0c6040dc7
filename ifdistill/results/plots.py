"""PNG figures of a report: IFEval against step, teacher-forced metrics against IFEval, per-type map.

Why these three: the curve shows when a run peaks (the researchers' tables are per checkpoint); the
teacher-forced scatter makes visible that token accuracy / cross-entropy and IFEval can move apart
(../shared/context.md, sections 2 and 3); the heatmap shows which instruction types a method gains or
forgets relative to the base model, which one aggregate number hides.

All figures are drawn from the report dict (:func:`ifdistill.results.report.build_report`) with the
Agg backend, so they render on a machine without a display.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LEVELS = (("prompt", "Prompt level"), ("inst", "Instruction level"))
DPI = 130


def _ok(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


MAX_BANDS = 6  # more overlapping ±1 se bands hide the lines
MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # 7 markers against 10 colours: 70 distinct pairs


def styles(report: dict) -> dict[str, dict[str, Any]]:
    """One ``{"color", "marker"}`` per row for every figure.

    Rows with steps cycle through tab10's colours and, with a coprime period, through
    :data:`MARKERS`, so up to 70 runs differ in colour or marker (a legend stays readable after the
    10th run). Rows without steps (base model, stand-alone evaluations) are black / grey stars.
    """
    cmap = plt.get_cmap("tab10")
    stepped = [n for n, pts in report["curves"].items() if any(p["step"] is not None for p in pts)]
    out = {n: {"color": "black" if n == report.get("base_model") else "0.45", "marker": "*"}
           for n in report["curves"]}
    out.update({n: {"color": cmap(i % 10), "marker": MARKERS[i % len(MARKERS)]} for i, n in enumerate(stepped)})
    return out


def draw_ifeval_vs_step(report: dict):
    """The figure of :func:`plot_ifeval_vs_step` (None without any stepped curve).

    Two panels (prompt / instruction level): strict solid with a ±1 se band, loose dashed; each run
    its own colour and marker (the bands are left out above :data:`MAX_BANDS` runs). Rows without steps (a base model, a stand-alone evaluation) are
    horizontal reference lines with a star at step 0 (the base model is where training starts). The
    y axis starts at 0 so distances between runs are not magnified.
    """
    curves = report["curves"]
    stepped = {n: [p for p in pts if p["step"] is not None] for n, pts in curves.items()}
    # the two levels' strict metrics of per-prompt decisions; a report of another benchmark has none
    levels = [f"{level}_level_strict_acc" for level, _ in LEVELS]
    if not any(_ok(p.get(m)) for pts in stepped.values() for p in pts for m in levels):
        return None
    style = styles(report)
    bands = sum(bool(pts) for pts in stepped.values()) <= MAX_BANDS
    last_step = max(p["step"] for pts in stepped.values() for p in pts)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharex=True)
    for ax, (level, title) in zip(axes, LEVELS):
        for name, points in curves.items():
            pts = stepped[name]
            c, marker = style[name]["color"], style[name]["marker"]
            strict, loose = f"{level}_level_strict_acc", f"{level}_level_loose_acc"
            if not pts:  # reference line, marked at step 0
                p = points[0] if points else {}
                if _ok(p.get(strict)):
                    ax.axhline(100 * p[strict], color=c, lw=1.2, ls=":")
                    ax.plot([0], [100 * p[strict]], marker, color=c, ms=13, mec="white", zorder=5,
                            label=f"{name} strict")
                if _ok(p.get(loose)):
                    ax.axhline(100 * p[loose], color=c, lw=1.2, ls="-.", alpha=0.7)
                    ax.plot([0], [100 * p[loose]], marker, color=c, ms=9, mfc="none", zorder=5,
                            label=f"{name} loose")
                continue
            steps = [p["step"] for p in pts]
            ys = [100 * p[strict] if _ok(p.get(strict)) else math.nan for p in pts]
            ses = [100 * p[f"{strict}_stderr"] if _ok(p.get(f"{strict}_stderr")) else 0.0 for p in pts]
            ax.plot(steps, ys, "-", marker=marker, color=c, ms=5, label=f"{name} strict")
            if bands:
                ax.fill_between(steps, [y - s for y, s in zip(ys, ses)], [y + s for y, s in zip(ys, ses)],
                                color=c, alpha=0.12, lw=0)
            yl = [100 * p[loose] if _ok(p.get(loose)) else math.nan for p in pts]
            ax.plot(steps, yl, "--", marker=marker, color=c, ms=4, mfc="none", alpha=0.85, label=f"{name} loose")
        ax.set_title(f"IFEval {title.lower()} accuracy")
        ax.set_xlabel("training step")
        ax.set_ylabel("accuracy (%)")
        ax.set_xlim(left=-0.04 * last_step)  # room for the step-0 stars
        ax.set_ylim(0, min(100.0, ax.get_ylim()[1] * 1.05))
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False,
               ncol=1 + len(labels) // 30)
    band = "band = ±1 se" if bands else f"no ±1 se bands with more than {MAX_BANDS} runs (see report.md)"
    fig.suptitle(f"IFEval over checkpoints (strict: solid, filled, {band}; loose: dashed, hollow; "
                 "star at step 0: no training steps)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_ifeval_vs_step(report: dict, path: Path) -> Path | None:
    """:func:`draw_ifeval_vs_step` saved as a PNG."""
    fig = draw_ifeval_vs_step(report)
    if fig is None:
        return None
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_tf_vs_ifeval(report: dict, path: Path, metric: str = "prompt_level_strict_acc") -> Path | None:
    """IFEval (y) against teacher-forced accuracy and cross-entropy (x), one path per run over its
    checkpoints (labelled with the step). Runs whose paths cross or run backwards are where the
    training diagnostics and the evaluation disagree."""
    curves = {n: [p for p in pts if p["step"] is not None and _ok(p.get(metric))]
              for n, pts in report["curves"].items()}
    panels = [(key, label) for key, label in (("tfa", "teacher-forced accuracy (higher = better imitation)"),
                                              ("tfce", "teacher-forced cross-entropy (lower = better; axis reversed)"))
              if any(_ok(p.get(key)) for pts in curves.values() for p in pts)]
    if not panels:
        return None
    style = styles(report)
    references = {n: pts[0][metric] for n, pts in report["curves"].items()
                  if len(pts) == 1 and pts[0]["step"] is None and _ok(pts[0].get(metric))}
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.8), squeeze=False)
    for ax, (key, label) in zip(axes[0], panels):
        for name, y in references.items():
            ax.axhline(100 * y, color=style[name]["color"], lw=1.2, ls=":", label=f"{name} (IFEval only)")
        for name, pts in curves.items():
            pts = [p for p in pts if _ok(p.get(key))]
            if not pts:
                continue
            xs = [p[key] for p in pts]
            ys = [100 * p[metric] for p in pts]
            c = style[name]["color"]
            ax.plot(xs, ys, "-", color=c, alpha=0.5, lw=1)
            ax.scatter(xs, ys, color=c, marker=style[name]["marker"],
                       s=[18 + 50 * i / max(1, len(pts) - 1) for i in range(len(pts))], label=name, zorder=3)
            for x, y, p in zip(xs, ys, pts):
                ax.annotate(str(p["step"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7, color=c)
        if key == "tfce":
            ax.invert_xaxis()  # better to the right in both panels
        ax.set_xlabel(label)
        ax.set_ylabel(f"IFEval {metric.replace('_acc', '').replace('_', ' ')} (%)")
        ax.set_ylim(0, min(100.0, ax.get_ylim()[1] * 1.05))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, frameon=False)
    fig.suptitle("Training diagnostics against IFEval over checkpoints (labels: step; larger = later)",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_per_type_heatmap(report: dict, path: Path) -> Path | None:
    """Rows: instruction types (with the reference's accuracy and count); columns: runs; cell: change
    in percentage points against the reference (red = forgotten, blue = gained; '~' = noise)."""
    pt = report["per_instruction_type"]
    names = list(pt["runs"])
    types = sorted({t for r in pt["runs"].values() for t in r})
    if not names or not types:
        return None
    values = [[(pt["runs"][n].get(t) or {}).get("delta") for n in names] for t in types]
    grid = [[100 * v if _ok(v) else math.nan for v in row] for row in values]
    finite = [abs(v) for row in grid for v in row if not math.isnan(v)]
    limit = max(finite + [1.0])
    fig, ax = plt.subplots(figsize=(2.2 + 1.3 * len(names) + 3.0, 0.8 + 0.32 * len(types)))
    im = ax.imshow(grid, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
    for i, t in enumerate(types):
        for j, n in enumerate(names):
            cell = pt["runs"][n].get(t) or {}
            v = grid[i][j]
            if math.isnan(v):
                continue
            text = ("0" if round(v) == 0 else f"{v:+.0f}") + ("~" if cell.get("within_2se") else "")
            ax.text(j, i, text, ha="center", va="center", fontsize=7,
                    color="white" if abs(v) > 0.6 * limit else "black")
    labels = []
    for t in types:
        ref = next((pt["runs"][n][t] for n in names if t in pt["runs"][n]), {})
        acc = f"{100 * ref['reference']:.0f}%" if _ok(ref.get("reference")) else "–"
        labels.append(f"{t} (n={ref.get('count', '–')}, {acc})")
    ax.set_yticks(range(len(types)), labels, fontsize=7)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    cbar = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    cbar.set_label(f"Δ {pt['mode']} accuracy vs {pt['reference']} (pp)")
    ax.set_title(f"Per instruction type: change of {pt['mode']} accuracy against {pt['reference']}\n"
                 f"row label: n instructions, {pt['reference']} accuracy; ~ = under 2 paired se", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_sweep_curves(page: dict | None, path: Path) -> Path | None:
    """Every results-page column over steps, one panel per column, one line per seed group (swept
    value): the mean over seeds with a ±1 se band where there are several seeds; the base model's
    value as a dotted black line. None without a group evaluated at two steps or more."""
    if not page or not any(len(pts) > 1 for g in page["curves"] for pts in g["columns"].values()):
        return None
    columns = page["columns"]
    base = next((r for r in page["rows"] if r["kind"] == "base"), None)
    fig, axes = plt.subplots(1, len(columns), figsize=(4.2 * len(columns), 3.6), squeeze=False)
    cmap = plt.get_cmap("tab10")
    for ax, column in zip(axes[0], columns):
        label, scale = column["label"], 100 if column.get("fraction", True) else 1  # a fraction in percent
        for i, g in enumerate(page["curves"]):
            pts = g["columns"][label]
            if not pts:
                continue
            x = [p["step"] for p in pts]
            y = [scale * p["mean"] for p in pts]
            ax.plot(x, y, marker=MARKERS[i % len(MARKERS)], color=cmap(i % 10), label=g["label"])
            if all(_ok(p["se"]) for p in pts):
                ax.fill_between(x, [v - scale * p["se"] for v, p in zip(y, pts)],
                                [v + scale * p["se"] for v, p in zip(y, pts)], color=cmap(i % 10), alpha=0.15)
        cell = base["cells"][label] if base else None
        if cell:
            ax.axhline(scale * cell["value"], color="black", linestyle=":", label="base")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel("percent" if scale == 100 else column["metric"])
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle("Every benchmark over steps per swept value (mean over seeds, band ±1 se)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def write_plots(report: dict, out_dir: Path) -> list[Path]:
    """All figures that have data; returns the paths written."""
    made = [plot_sweep_curves(report.get("page"), out_dir / "sweep_curves.png"), plot_ifeval_vs_step(report, out_dir / "ifeval_vs_step.png"),
            plot_tf_vs_ifeval(report, out_dir / "tf_vs_ifeval.png", report["rankings"]["metric"]),
            plot_per_type_heatmap(report, out_dir / "per_type_heatmap.png")]
    return [p for p in made if p is not None]
