"""The figures of the forgetting analyses: the trade-off picture and format vs task over steps.

Drawn from the dict of :func:`ifdistill.results.forgetting.build_forgetting` with the Agg backend, as
the report's other figures (:mod:`ifdistill.results.plots`). Each ``draw_*`` returns the figure and its
caption; the caption is what report.md and report.html print under the image.
"""

from __future__ import annotations

import math
from typing import Any

from ifdistill.results.plots import MARKERS, _ok, plt

# The page's verdicts, as region colours (wins green, forgetting red, no clear gain grey).
REGIONS = (("wins", "tab:green"), ("forgetting", "tab:red"), ("no clear gain", "0.6"))


def _median(values: list[float]) -> float:
    values = sorted(v for v in values if _ok(v))
    if not values:
        return 0.0
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def _styles(points: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[Any, str]]:
    cmap = plt.get_cmap("tab10")
    methods = sorted({str(p["method"]) for p in points})
    ratios = sorted({p["replay_ratio"] for p in points}, key=lambda r: (r is None, str(r)))
    return ({m: cmap(i % 10) for i, m in enumerate(methods)},
            {r: MARKERS[i % len(MARKERS)] for i, r in enumerate(ratios)})


def _shade(ax, k: float, se_x: float, se_y: float) -> None:
    """The page's verdict regions at the median standard errors: gain beyond k se, worst not down beyond k se."""
    x0, y0 = k * se_x * 100, -k * se_y * 100
    (xl, xh), (yl, yh) = ax.get_xlim(), ax.get_ylim()
    xh, yl, yh = max(xh, x0 * 1.5 + 1), min(yl, y0 * 1.5 - 1), max(yh, 1)
    colours = dict(REGIONS)
    ax.fill_between([x0, xh], y0, yh, color=colours["wins"], alpha=0.10, lw=0, label="wins region")
    ax.fill_between([x0, xh], yl, y0, color=colours["forgetting"], alpha=0.10, lw=0, label="forgetting region")
    ax.fill_between([xl, x0], yl, yh, color=colours["no clear gain"], alpha=0.10, lw=0, label="no clear gain region")
    ax.set_xlim(xl, xh)
    ax.set_ylim(yl, yh)


def draw_tradeoff(forgetting: dict[str, Any]):
    """Two panels, one point per run (or checkpoint, joined per run): gain on the gain column (x) or
    drift from the base (x) against the worst regression elsewhere (y), ±1 se bars; colour = method,
    marker = replay ratio. None without a point."""
    points = [p for p in forgetting["tradeoff"]["points"] if _ok(p["gain"]) and _ok(p["worst"])]
    if not points:
        return None
    k = forgetting["noise_se"]
    colour, marker = _styles(points)
    drift = any(_ok(p["drift"]) for p in points)
    fig, axes = plt.subplots(1, 2 if drift else 1, figsize=(13 if drift else 7, 5), squeeze=False)
    panels = [("gain", f"gain on {points[0]['gain_column']} vs base (pp, paired ±1 se)")]
    if drift:
        panels.append(("drift", "drift from the base: KL(base || model) per token on the new data (nats)"))
    for ax, (x_key, x_label) in zip(axes[0], panels):
        by_run: dict[str, list[dict[str, Any]]] = {}
        for p in points:
            by_run.setdefault(p["run"], []).append(p)
        for run, pts in by_run.items():
            pts = [p for p in pts if _ok(p[x_key])]
            pts.sort(key=lambda p: p["step"])
            if not pts:
                continue
            c, m = colour[str(pts[0]["method"])], marker[pts[0]["replay_ratio"]]
            scale = 1.0 if x_key == "drift" else 100.0
            xs, ys = [scale * p[x_key] for p in pts], [100 * p["worst"] for p in pts]
            if len(pts) > 1:
                ax.plot(xs, ys, "-", color=c, alpha=0.4, lw=1)
            xerr = [100 * (p["gain_se"] or 0.0) for p in pts] if x_key == "gain" else None
            ax.errorbar(xs, ys, xerr=xerr, yerr=[100 * (p["worst_se"] or 0.0) for p in pts], fmt="none",
                        ecolor=c, alpha=0.5, lw=1)
            ax.scatter(xs, ys, color=c, marker=m, s=[60 if p["final"] else 22 for p in pts], zorder=3,
                       edgecolors="black", linewidths=0.4)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xlabel(x_label, fontsize=9)
        ax.set_ylabel("worst change on the other columns vs base (pp, paired ±1 se)", fontsize=9)
        ax.grid(alpha=0.3)
        if x_key == "gain":
            ax.axvline(0, color="black", lw=0.6)
            _shade(ax, k, _median([p["gain_se"] for p in points]), _median([p["worst_se"] for p in points]))
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=f"method {m}") for m, c in colour.items()]
    handles += [plt.Line2D([], [], color="0.3", marker=mk, ls="", label=f"replay ratio {r}") for r, mk in marker.items()]
    handles += [plt.Rectangle((0, 0), 1, 1, color=c, alpha=0.25, label=f"{v} region") for v, c in REGIONS]
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()
    caption = (f"Trade-off: gain on {points[0]['gain_column']} against the worst paired regression on the other "
               f"columns, one point per {'checkpoint (joined per run, large: final)' if forgetting['per_checkpoint'] else 'run (final checkpoint)'}; "
               f"colour = method, marker = replay ratio; regions = the page's verdict rule at the median standard "
               f"errors (gain beyond {k:g} se and no column down beyond {k:g} se: wins)"
               + ("; right: drift from the base on x." if drift else "; no drift logged."))
    return fig, caption


def draw_format_task(forgetting: dict[str, Any]):
    """One panel per format/task pair: per run the format curve (solid) and the task curve (dashed) over
    steps, step 0 = the base model. None without a curve of two points."""
    runs = forgetting["format_task"]["runs"]
    series = sorted({s for per in runs.values() for s, v in per.items() if len(v["points"]) > 1})
    if not series:
        return None
    cmap = plt.get_cmap("tab10")
    fig, axes = plt.subplots(1, len(series), figsize=(5.2 * len(series), 4.2), squeeze=False)
    for ax, name in zip(axes[0], series):
        for i, (run, per) in enumerate(sorted(runs.items())):
            curve = per.get(name)
            if not curve:
                continue
            steps = [p["step"] for p in curve["points"]]
            c = cmap(i % 10)
            ax.plot(steps, [100 * p["format_value"] if _ok(p["format_value"]) else math.nan for p in curve["points"]],
                    "-", marker="o", ms=3, color=c, label=f"{run} format")
            ax.plot(steps, [100 * p["task_value"] if _ok(p["task_value"]) else math.nan for p in curve["points"]],
                    "--", marker="s", ms=3, color=c, alpha=0.8, label=f"{run} task")
            if curve["note"]:
                ax.axvline(curve["saturates_at"], color=c, lw=0.8, ls=":")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step (0: base model)")
        ax.set_ylabel("percent")
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)
    fig.tight_layout()
    caption = ("Format vs task over steps: format curves solid (format instructions' strict accuracy; a strict "
               "filter's parse rate), task curves dashed (content instructions' strict accuracy; accuracy under the "
               "lenient filter); a dotted line marks where a format curve saturated before its task curve rose.")
    return fig, caption
