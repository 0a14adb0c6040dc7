"""Uploading a report's tables and figures to W&B as one run of ``job_type="report"``.

Why a run of its own rather than writing into the training runs: a report compares several runs, and
re-opening finished training runs to add comparison tables would change their history. Offline mode
(``WANDB_MODE=offline`` or ``mode="offline"``) writes the run under ``<dir>/wandb`` for a later
``wandb sync``; :mod:`ifdistill.tracking.wandb_offline` reads it back in tests.

Logged: ``report/runs``, ``report/deltas``, ``report/per_instruction_type``, ``report/seed_groups``
(tables with the CSV files' columns), the results page's ``report/page`` and ``report/page_deltas``
(the tables of report.md, cell for cell), one ``wandb.Image`` per PNG under ``report/<file stem>``, and
the baseline / base model names in the summary.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any


def _csv_table(path: Path):
    import wandb

    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return None
    return wandb.Table(columns=rows[0], data=rows[1:])


def upload(report: dict, out_dir: str | os.PathLike, *, project: str = "ifdistill", name: str | None = None,
           mode: str | None = None, entity: str | None = None) -> dict[str, Any]:
    """Log the report written to ``out_dir`` (CSV files and PNGs) to a new W&B run.

    Returns ``{"id", "dir", "url"}`` of the run (``url`` is ``None`` offline).
    """
    import wandb

    out_dir = Path(out_dir)
    run = wandb.init(project=project, entity=entity, name=name, job_type="report", dir=str(out_dir),
                     mode=mode, config={"report_options": report["options"],
                                        "baseline": report["baseline"], "base_model": report["base_model"]})
    try:
        payload: dict[str, Any] = {}
        for key, file in (("runs", "report.csv"), ("per_instruction_type", "per_instruction_type.csv"),
                          ("seed_groups", "seed_groups.csv")):
            if (out_dir / file).is_file():
                table = _csv_table(out_dir / file)
                if table is not None:
                    payload[f"report/{key}"] = table
        if report["deltas"]:
            columns = ["run", "baseline", "metric", "delta", "se", "se_kind", "within_2se"]
            data = [[d["run"], d["baseline"], m, v["delta"], v["se"], v["se_kind"], v["within_2se"]]
                    for d in report["deltas"] for m, v in d["metrics"].items()]
            payload["report/deltas"] = wandb.Table(columns=columns, data=data)
        if report.get("page"):
            from ifdistill.results import page_render

            for key, (header, rows) in (("page", page_render.results_table(report["page"])),
                                        ("page_deltas", page_render.deltas_table(report["page"]))):
                if rows:
                    payload[f"report/{key}"] = wandb.Table(columns=list(header), data=rows)
        for png in sorted(out_dir.glob("*.png")):
            payload[f"report/{png.stem}"] = wandb.Image(str(png), caption=png.stem)
        run.log(payload)
        run.summary["baseline"] = report["baseline"]
        run.summary["base_model"] = report["base_model"] or ""
        run.summary["n_rows"] = len(report["runs"])
        info = {"id": run.id, "dir": run.dir, "url": getattr(run, "url", None)}
    finally:
        run.finish()
    return info
