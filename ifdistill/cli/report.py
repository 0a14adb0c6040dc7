"""``ifdistill-report``: results tables, deltas with paired tests, plots; a design's plan; the ICL gap; the LoRA check.

Four subcommands (``runs`` is the default, so ``ifdistill-report DIR...`` works)::

    ifdistill-report [runs] DIR... [--baseline NAME_OR_DIR] [--base-model RESULTS_DIR] [-o OUT_DIR]
                     [--columns SPEC...] [--compare ROW:REF] [--noise-se K] [--gain-column LABEL]
                     [--target-effect X] [--checkpoint final|best] [--tfa-key KEY] [--tfce-key KEY]
                     [--tradeoff-checkpoints] [--wandb]
    ifdistill-report plan PILOT_DIR... --effect POINTS [--base-model RESULTS_DIR] [--compare A:B]
                     [--columns SPEC...] [--available LABEL=N] [-o OUT_DIR]
    ifdistill-report icl-gap ZERO_SHOT_RESULTS_DIR K_SHOT_RESULTS_DIR [-o OUT_DIR]
    ifdistill-report lora-check BASE_MODEL_DIR ADAPTER_DIR [--merged DIR] [--prompts JSONL] [--limit N]

``DIR`` is a run directory (with metrics.json), an evaluator output directory (with results.json),
or a folder holding either (a sweep); see :mod:`ifdistill.results.runs`. ``runs`` writes
``report.md`` (the cross-benchmark results page first, :mod:`ifdistill.results.page`), ``report.html``
(the page, self-contained), ``report.csv`` (+ ``per_instruction_type.csv``, ``seed_groups.csv``), the combined
``metrics.json`` and the PNGs into ``OUT_DIR``. The Python entry point for the same work is
:func:`write_report`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ifdistill.results import runs as runs_mod
from ifdistill.results.forgetting import build_forgetting, write_forgetting
from ifdistill.results.page import PageOptions, build_page, parse_column
from ifdistill.results.report import ReportOptions, build_report, group_labels, json_safe

SUBCOMMANDS = ("runs", "plan", "icl-gap", "lora-check")


def write_report(inputs: Sequence[str | Path], out_dir: str | Path, *, base_model: str | Path | None = None,
                 options: ReportOptions | None = None, wandb: bool = False,
                 wandb_kwargs: dict[str, Any] | None = None, benchmark: str | None = None,
                 page_options: PageOptions | None = None, tradeoff_checkpoints: bool = False) -> dict[str, Any]:
    """Load the runs under ``inputs``, build the report and write every output into ``out_dir``.

    ``out_dir`` is created only once the inputs have loaded and the report is built, so a wrong
    argument leaves nothing behind.

    ``benchmark``: report the training runs' extra benchmark of that name (``callbacks.checkpoint_eval.evals``)
    instead of their ``eval`` section. ``base_model``: the base model's evaluator output directory, or a
    folder of them (one per benchmark) for the results page. The results page
    (:mod:`ifdistill.results.page`) is report.md's first section, adds its columns to report.csv and is
    report.html. ``tradeoff_checkpoints``: a trade-off point per checkpoint, not per run
    (:mod:`ifdistill.results.forgetting`, the page's "Learning and forgetting" section).

    Returns ``{"report": <the dict>, "files": [written paths], "wandb": <run info or None>}``.
    """
    from ifdistill.evaluator import output as eval_output
    from ifdistill.benchmarks.registry import default_name, get as benchmark_named
    from ifdistill.results import page_render, plots, tables

    notes: list[str] = []
    reruns: list[runs_mod.Run] = []
    loaded = runs_mod.load_all(inputs, notes, benchmark, reruns=reruns)
    base_dirs = runs_mod.base_dirs(base_model)
    # the report's per-run tables compare each benchmark's rows with that benchmark's base directory (the runs'
    # benchmark's first, named "base"); the page reads every one
    reported = next((r.final.benchmark for r in loaded if r.kind == "run" and r.final is not None), default_name())
    benchmarks = {p: eval_output.benchmark_of(eval_output.read_results_json(p)) for p in base_dirs}
    order = sorted(benchmarks, key=lambda p: benchmarks[p] != reported)
    base = [runs_mod.load_eval_dir(p, name="base" if benchmarks[p] == reported else f"base {benchmarks[p]}",
                                   method="base") for p in order]
    if base_dirs:
        resolved = {p.resolve() for p in base_dirs}
        loaded = [r for r in loaded if r.path.resolve() not in resolved]
    report = build_report(loaded, base, options, notes)  # every input error is raised by here
    labels = group_labels(loaded, report["key_columns"])
    page = build_page(loaded, base_dirs, page_options, reruns, labels)
    report["page"] = page
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = plots.write_plots(report, out)
    images = list(files)
    forgetting_md, forgetting_html = [], ""
    if page:  # -- learning and forgetting (ifdistill.results.forgetting): its own figures and section --
        report["forgetting"] = build_forgetting(page, loaded, base_dirs, per_checkpoint=tradeoff_checkpoints)
        pngs, forgetting_md, forgetting_html = write_forgetting(report["forgetting"], out)
        files += pngs
    first = page_render.render_markdown(page, {p.name for p in files}) + forgetting_md if page else []
    # the first evaluated row's benchmark (build_report refused a report without one)
    title = "Results" if page else f"{benchmark_named(report['columns'][0]['benchmark']).display} report"
    (out / "report.md").write_text(tables.render_markdown(report, images={p.name for p in files}, first=first,
                                                          title=title))
    files += [out / "report.md", *tables.write_csvs(report, out, extra=page_render.csv_columns(page) if page else None)]
    if page:
        (out / "report.html").write_text(page_render.render_html(page, "Results", images, [forgetting_html]))
        files.append(out / "report.html")
    (out / "metrics.json").write_text(json.dumps(json_safe(report), indent=2, sort_keys=False) + "\n")
    files.append(out / "metrics.json")
    info = None
    if wandb:
        from ifdistill.results.wandb_upload import upload

        info = upload(report, out, **(wandb_kwargs or {}))
    return {"report": report, "files": files, "wandb": info}


def _add_bootstrap_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-resamples", type=int, default=10000)
    p.add_argument("--bootstrap-seed", type=int, default=0)
    p.add_argument("--confidence", type=float, default=0.95)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ifdistill-report", description=__doc__.replace("``", ""),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="{runs,plan,icl-gap,lora-check}")

    p = sub.add_parser("runs", help="the results report of runs / sweeps / evaluator outputs (default)")
    p.add_argument("inputs", nargs="+", help="run dirs, sweep dirs or evaluator output dirs")
    p.add_argument("--baseline", help="row to compute deltas against (run name or directory; 'base' for "
                   "--base-model); default: the base model if given, else the first row")
    p.add_argument("--base-model", help="evaluator output dir of the base model (per-type gain/forgetting)")
    p.add_argument("-o", "--out-dir", help="default: outputs/report/<date_time>")
    p.add_argument("--checkpoint", choices=("final", "best"), default="final",
                   help="which checkpoint of each run the deltas compare (default: final)")
    p.add_argument("--select-metric", metavar="METRIC",
                   help="metric that picks the best checkpoint and orders the rankings (one of the report's "
                   "columns; default: the headline metric of the baseline's benchmark)")
    p.add_argument("--tfa-key", action="append", help="training metric name of teacher-forced accuracy "
                   f"(repeatable; first found wins; default: {', '.join(runs_mod.DEFAULT_TFA_KEYS)})")
    p.add_argument("--tfce-key", action="append", help="training metric name of teacher-forced "
                   f"cross-entropy (default: {', '.join(runs_mod.DEFAULT_TFCE_KEYS)})")
    p.add_argument("--per-type-mode", choices=("strict", "loose"), default="strict")
    p.add_argument("--benchmark", help="report the runs' extra benchmark of this name (callbacks.checkpoint_eval."
                   "evals, e.g. ifbench) instead of their eval section")
    p.add_argument("--columns", nargs="+", metavar="[LABEL=][BENCHMARK:]METRIC",
                   help="the results page's columns (default: IFEval prompt/inst strict, gsm8k strict-match "
                   "exact_match, mmlu acc, truthfulqa_mc2 acc, commonsense_qa acc -- those some row has)")
    p.add_argument("--noise-se", type=float, default=2.0,
                   help="a delta under this many standard errors is flat (deltas, verdicts, reproducibility)")
    p.add_argument("--gain-column", help="the verdict's gain column (label; default the first IFEval column)")
    p.add_argument("--target-effect", type=float, metavar="X",
                   help="without a gain, 'no clear gain' when the gain column's MDE is at most X (percentage points "
                   "for fractions), else 'underpowered' (default: 5 points for a column of fractions)")
    p.add_argument("--tradeoff-checkpoints", action="store_true",
                   help="the trade-off figure: a point per evaluated checkpoint (default: per run, its final one)")
    p.add_argument("--compare", action="append", metavar="ROW:REFERENCE",
                   help="a deltas row of the results page (repeatable; default: every row against the first)")
    _add_bootstrap_args(p)
    p.add_argument("--wandb", action="store_true", help="also log tables and PNGs to a W&B run")
    p.add_argument("--wandb-project", default="ifdistill")
    p.add_argument("--wandb-mode", choices=("online", "offline"), help="default: $WANDB_MODE / wandb's own")

    p = sub.add_parser("plan", help="the prompts and seeds a comparison needs to detect an effect, from a pilot")
    p.add_argument("inputs", nargs="+", help="the pilot: run dirs or sweep dirs")
    p.add_argument("--effect", type=float, required=True,
                   help="the target effect: percentage points for fractions (5 = 5 points), else the metric's unit")
    p.add_argument("--base-model", help="evaluator output dir(s) of the base model: each seed group is planned against it")
    p.add_argument("--compare", action="append", metavar="A:B",
                   help="plan A against B (seed group labels, run names, methods, 'base'; repeatable)")
    p.add_argument("--columns", nargs="+", metavar="[LABEL=][BENCHMARK:]METRIC", help="as for runs")
    p.add_argument("--available", action="append", metavar="LABEL=N",
                   help="the benchmark's prompts for a column label or benchmark (default: the evaluated data file's rows)")
    p.add_argument("--power", type=float, default=0.8, help="the power to plan for (default 0.8)")
    p.add_argument("--noise-se", type=float, default=2.0, help="the rule's threshold in standard errors (default 2)")
    p.add_argument("--benchmark", help="plan the runs' extra benchmark of this name instead of their eval section")
    p.add_argument("-o", "--out-dir", help="also write plan.md and plan.json there")

    p = sub.add_parser("icl-gap", help="k-shot minus 0-shot of one model, from two evaluator outputs")
    p.add_argument("zero_shot_dir")
    p.add_argument("k_shot_dir")
    p.add_argument("-o", "--out-dir", help="default: next to the k-shot output, icl_gap/")
    _add_bootstrap_args(p)

    p = sub.add_parser("lora-check", help="live vs reloaded vs merged LoRA generations agree?")
    p.add_argument("base_model_dir")
    p.add_argument("adapter_dir")
    p.add_argument("--merged", help="an exported merged model directory to compare as well")
    p.add_argument("--prompts", help="rows of the default benchmark's data, JSONL (default: its shared offline copy)")
    p.add_argument("--limit", type=int, default=16, help="number of prompts (default 16)")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--dtype", default="float32")
    p.add_argument("-o", "--out-dir", help="default: <adapter_dir>/lora_check")
    p.add_argument("--fail-on-mismatch", action="store_true", help="exit 1 when any two paths disagree")
    return parser


def _cmd_runs(args) -> int:
    options = ReportOptions(
        baseline=args.baseline, checkpoint=args.checkpoint, select_metric=args.select_metric,
        tfa_keys=tuple(args.tfa_key) if args.tfa_key else runs_mod.DEFAULT_TFA_KEYS,
        tfce_keys=tuple(args.tfce_key) if args.tfce_key else runs_mod.DEFAULT_TFCE_KEYS,
        per_type_mode=args.per_type_mode, n_resamples=args.bootstrap_resamples,
        bootstrap_seed=args.bootstrap_seed, confidence=args.confidence)
    page_options = PageOptions(columns=tuple(parse_column(c) for c in args.columns) if args.columns else None,
                               noise_se=args.noise_se, gain_column=args.gain_column,
                               compare=tuple(_pairs(args.compare)), target_effect=args.target_effect)
    out_dir = Path(args.out_dir or Path("outputs/report") / time.strftime("%Y-%m-%d_%H-%M-%S"))
    result = write_report(args.inputs, out_dir, base_model=args.base_model, options=options,
                          wandb=args.wandb, wandb_kwargs={"project": args.wandb_project, "mode": args.wandb_mode},
                          benchmark=args.benchmark, page_options=page_options,
                          tradeoff_checkpoints=args.tradeoff_checkpoints)
    report = result["report"]
    for note in report["warnings"]:
        print(f"ifdistill-report: warning: {note}", file=sys.stderr)
    print(f"{len(report['runs'])} row(s), baseline {report['baseline']}; wrote {out_dir}/report.md "
          f"and {len(result['files']) - 1} more file(s)")
    if result["wandb"]:
        print(f"W&B run {result['wandb']['id']} ({result['wandb']['url'] or result['wandb']['dir']})")
    return 0


def _pairs(specs: Sequence[str] | None) -> list[tuple[str, str]]:
    """``--compare ROW:REFERENCE`` values as pairs (a name may hold ``:``; the last one splits)."""
    pairs = []
    for spec in specs or []:
        row, sep, ref = spec.rpartition(":")
        if not sep or not row or not ref:
            raise ValueError(f"--compare {spec!r}: expected ROW:REFERENCE")
        pairs.append((row, ref))
    return pairs


def _cmd_plan(args) -> int:
    from ifdistill.results import plan

    available = {}
    for spec in args.available or []:
        label, sep, n = spec.rpartition("=")
        if not sep or not label or not n.isdigit():
            raise ValueError(f"--available {spec!r}: expected LABEL=N (a column label or benchmark, a count)")
        available[label] = int(n)
    if not 0 < args.power < 1:
        raise ValueError(f"--power {args.power:g}: expected a probability between 0 and 1")
    result = plan.build_plan(args.inputs, args.base_model, args.effect,
                             columns=tuple(parse_column(c) for c in args.columns) if args.columns else None,
                             compare=_pairs(args.compare), available=available, threshold=args.noise_se,
                             power_level=args.power, benchmark=args.benchmark)
    print(plan.render_markdown(result))
    if args.out_dir:
        print(f"wrote {plan.write(result, args.out_dir)[1]}")
    return 0


def _cmd_icl_gap(args) -> int:
    from ifdistill.results import icl_gap

    gap = icl_gap.icl_gap(args.zero_shot_dir, args.k_shot_dir, n_resamples=args.bootstrap_resamples,
                          seed=args.bootstrap_seed, confidence=args.confidence)
    written = icl_gap.write(gap, args.out_dir or Path(args.k_shot_dir) / "icl_gap")
    print(icl_gap.render_markdown(gap))
    print(f"wrote {written[1]}")
    return 0


def _cmd_lora_check(args) -> int:
    from ifdistill.benchmarks.registry import get as benchmark_named
    from ifdistill.results import lora_check

    prompts = lora_check.load_prompts(args.prompts or benchmark_named(None).local_rows(), args.limit)
    result = lora_check.check_lora_load_paths(args.base_model_dir, args.adapter_dir, prompts,
                                              merged_dir=args.merged, max_new_tokens=args.max_new_tokens,
                                              dtype=args.dtype)
    written = lora_check.write(result, args.out_dir or Path(args.adapter_dir) / "lora_check")
    print(lora_check.render_markdown(result))
    print(f"wrote {written[1]}")
    return 1 if args.fail_on_mismatch and not result["all_agree"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        argv.insert(0, "runs")
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return 2
    handler = {"runs": _cmd_runs, "plan": _cmd_plan, "icl-gap": _cmd_icl_gap, "lora-check": _cmd_lora_check}[args.command]
    try:
        return handler(args)
    except (KeyError, FileNotFoundError, ValueError) as e:  # EvalOutputError is a ValueError
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"ifdistill-report: error: {message}", file=sys.stderr)
        return 2
    except Exception as e:  # the report folder on a full disk, or not writable: one line naming it
        from ifdistill.write_failures import as_write_failure

        written = as_write_failure(e, near=getattr(args, "out_dir", None))
        if written is None:
            raise
        print(f"ifdistill-report: error: {written}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
