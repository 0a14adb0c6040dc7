"""``ifdistill-eval backfill run_dir=DIR [steps=[200,400]] [runner=local|slurm] ...``: evaluate a run's
missing checkpoints.

An evaluation can be missing because it crashed past its retries, timed out, was skipped under back-
pressure, or training ended before it finished. Back-fill is the second driver of the callback's
machinery (:class:`~ifdistill.callbacks.evaluations.CheckpointEvaluations` and its
:class:`~ifdistill.callbacks.eval_jobs.EvalQueue`): every export under ``<run>/exports`` without a result
in ``metrics.json`` is evaluated with the run's own resolved ``eval`` and ``model`` sections (from
``config.yaml``), and lands where a callback evaluation lands: ``<run>/evals/step_X``, ``metrics.json``
(``source: backfill``) and the run's loggers (the W&B run of the same id is resumed; values sit on the
``ifeval/step`` axis).

Where it runs: by default where the run's own evaluations ran (``callbacks.checkpoint_eval.runner`` in
``config.yaml``: a SLURM job per evaluation for a run trained with ``callbacks=checkpoint_eval_slurm``);
``runner=local``, ``runner=persistent`` (one ``ifdistill-eval serve`` for all the steps, the run's
``engine=persistent``) or ``runner=slurm`` chooses (``slurm.<field>=...`` sets a
:class:`~ifdistill.launchers.slurm_eval.SlurmRunner` field, e.g. ``slurm.partition=gpu``). The run's
``devices`` and ``retries`` apply unless given; there is no time limit unless ``timeout_s`` is given
(a run's limit is set against the training it must not hold up, which back-fill does not have).

A benchmark the run never evaluated is added by naming it as the callback's ``evals`` are named in
training: ``+eval@evals.<name>=<conf/eval option>`` (its keys ``evals.<name>.<key>=<value>``), e.g.
``ifdistill-eval backfill run_dir=... +eval@evals.lab=lmeval_lab_table``. Its section is resolved against
the run's own ``model`` and ``paths``, so it evaluates every export exactly as the same option in training
would; its results land in ``evals/<name>/step_X``, ``metrics.json``'s ``evals/<name>`` and the resumed W&B
run on ``<name>/step`` (the section's W&B namespace, :func:`ifdistill.benchmarks.registry.namespace`).

Every export is verified against the sha256 digests of its ``export.json`` first
(:func:`~ifdistill.evaluator.model_source.verify_export`, all parts): a corrupt export is recorded as a
failure naming the file and no evaluator is started for it.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from ifdistill.callbacks.checkpoint_eval_settings import DEFAULTS as D  # what a run's config.yaml may lack
from ifdistill.callbacks.eval_jobs import EvalQueue
from ifdistill.callbacks.evaluations import CheckpointEvaluations
from ifdistill.runs.rundir import RunDir
from ifdistill.train.loggers import build_loggers, close_loggers

USAGE = ("usage: ifdistill-eval backfill run_dir=RUN_DIR [steps=[200,400]] [runner=local|slurm|persistent] "
         "[slurm.partition=gpu ...] [devices={cpu_threads_bind: '1'}] [timeout_s=3600] [retries=1] [log=true] "
         "[+eval@evals.NAME=OPTION [evals.NAME.KEY=VALUE ...]]")
NEW_EVAL = re.compile(r"^\+eval@evals\.(\w+)=(\S+)$")
NEW_EVAL_KEY = re.compile(r"^evals\.(\w+)\.(.+)$")


def added_evals(argv: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    """``{name: evaluator overrides}`` of the benchmarks the command line adds, and the other arguments."""
    added: dict[str, list[str]] = {}
    rest = []
    for arg in argv:
        if m := NEW_EVAL.match(arg):
            added.setdefault(m.group(1), []).insert(0, f"eval={m.group(2)}")
        elif (m := NEW_EVAL_KEY.match(arg)) and m.group(1) in {n.group(1) for n in map(NEW_EVAL.match, argv) if n}:
            added.setdefault(m.group(1), []).append(f"eval.{m.group(2)}")
        else:
            rest.append(arg)
    return added, rest


def added_sections(cfg: DictConfig, added: dict[str, list[str]]) -> dict[str, dict]:
    """Each added benchmark's eval section from its ``conf/eval`` option, resolved against the run's config."""
    from ifdistill.evaluator.cli import compose_config

    out = {}
    for name, overrides in added.items():
        section = OmegaConf.to_container(compose_config(overrides).eval, resolve=False)
        merged = OmegaConf.merge(cfg, {"backfill_evals": {name: section}})
        out[name] = OmegaConf.to_container(merged.backfill_evals[name], resolve=True)
    return out


def _callback_section(cfg: DictConfig) -> DictConfig:
    """The run's ``callbacks.checkpoint_eval`` (empty for a run trained without the callback)."""
    node = OmegaConf.select(cfg, "callbacks.checkpoint_eval")
    return node if node is not None else OmegaConf.create({})


def backfill(run_dir: str | os.PathLike, *, steps: Optional[Sequence[int]] = None, runner: Any = "run",
             runner_options: Optional[dict] = None, devices: Optional[dict] = None, log: bool = True,
             timeout_s: Optional[float] = None, retries: Optional[int] = None,
             add: Optional[dict[str, list[str]]] = None) -> dict[int, str]:
    """Evaluate the missing (or the given) steps; returns ``{step: "ok" | failure reason}``.

    ``add``: benchmarks the run never evaluated, ``{name: evaluator overrides}`` (:func:`added_evals`),
    evaluated at every export beside the run's own.

    ``runner``: ``"run"`` (what the run's config names; local when it names none), ``"local"``,
    ``"slurm"``, a config node with ``_target_`` or a runner object."""
    from ifdistill.evaluator.errors import CorruptExportError
    from ifdistill.evaluator.model_source import verify_export
    from ifdistill.launchers.runners import checkpoint_eval_runner, make_runner

    run = RunDir(Path(run_dir).absolute())
    cfg = OmegaConf.load(run.config_yaml)
    section = _callback_section(cfg)
    settings = OmegaConf.to_container(section, resolve=True)
    options = runner_options or {}
    if runner == "run":  # where the run's own evaluations ran
        runner = checkpoint_eval_runner(settings.get("runner"), settings.get("engine", D.engine),
                                        settings.get("persistent"), **options)
    queue = EvalQueue(max_running=1, max_pending=1 << 30, policy="wait",
                      timeout_s=float(timeout_s if timeout_s is not None else "inf"),
                      retries=int(retries if retries is not None else settings.get("retries", D.retries)),
                      runner=make_runner(runner, **options))
    extra = {str(k): v for k, v in (settings.get("evals") or {}).items()}  # the eval sections, like the callback's
    extra.update(added_sections(cfg, add or {}))
    evaluations = CheckpointEvaluations(
        run, {None: OmegaConf.to_container(cfg.eval, resolve=True), **extra}, queue=queue, source="backfill",
        model_cfg=OmegaConf.to_container(cfg.model, resolve=True),
        evaluate_kind=str(settings.get("evaluate_kind", D.evaluate_kind)),
        devices=devices if devices is not None else settings.get("devices"))
    exports = run.finished_exports()
    todo = sorted(steps) if steps else sorted(s for s in exports if not evaluations.is_done(s))
    loggers = _loggers(cfg, run) if log and todo else []
    outcome: dict[int, str] = {}
    try:
        for step in todo:
            if step not in exports:
                outcome[step] = f"no finished export for step {step} under {run.exports}"
                evaluations.record_failure(step, 0, outcome[step])
                continue
            try:
                verify_export(exports[step])
            except CorruptExportError as err:
                print(f"[backfill] step {step}: {err}", flush=True)
                evaluations.record_failure(step, 0, str(err))
                outcome[step] = str(err)
                continue
            print(f"[backfill] step {step}: evaluating {exports[step]}", flush=True)
            evaluations.land(evaluations.submit(step, exports[step]), loggers)
        events = queue.drain(float("inf"))
        evaluations.land(events, loggers)
        for ev in events:
            if ev.kind == "ok":
                outcome[ev.job.step] = "ok"
            elif ev.kind != "failed":  # failed: retried; its last attempt decides
                outcome[ev.job.step] = f"{ev.reason} (log: {ev.job.log_path})"
    finally:
        evaluations.abandon("back-fill stopped")  # nothing left running if this process is interrupted
        close_loggers(loggers)
    return outcome


def _loggers(cfg: Any, run: RunDir) -> list:
    """The run's own loggers (its W&B run resumed by id, in its group); ``cfg``: the run's config.yaml."""
    logger = cfg.get("logger")
    logger = OmegaConf.to_container(logger, resolve=True) if OmegaConf.is_config(logger) else logger
    return build_loggers(logger, run, run.read_meta()["run_id"], group=OmegaConf.select(cfg, "run.group"))


def main(argv: Optional[Sequence[str]] = None) -> int:
    add, rest = added_evals(list(sys.argv[1:] if argv is None else argv))
    try:
        args = OmegaConf.from_dotlist(rest)
    except Exception as err:  # noqa: BLE001 - omegaconf's grammar errors
        print(f"ifdistill-eval backfill: {str(err).splitlines()[0]}\n{USAGE}", file=sys.stderr)
        return 2
    if not args.get("run_dir"):
        print(USAGE, file=sys.stderr)
        return 2
    run = RunDir(str(args.run_dir))
    if not run.is_run():
        print(f"ifdistill-eval backfill: {run.root} is not a training run directory (no run.json)", file=sys.stderr)
        return 2
    runner = str(args.get("runner") or "run")
    if runner not in ("run", "local", "slurm", "persistent"):
        print(f"ifdistill-eval backfill: runner={runner}: use local, slurm or persistent\n{USAGE}", file=sys.stderr)
        return 2
    plain = OmegaConf.to_container(args)
    if add:
        from ifdistill.command_line import one_line

        try:  # an unknown option or key: one line, before anything runs
            added_sections(OmegaConf.load(run.config_yaml), add)
        except Exception as err:  # noqa: BLE001 - hydra's and omegaconf's composition errors
            print(f"ifdistill-eval backfill: {one_line(err)}", file=sys.stderr)
            return 2
    outcome = backfill(run.root, steps=[int(s) for s in plain.get("steps") or []] or None, runner=runner,
                       runner_options=plain.get("slurm") if runner == "slurm" else None,
                       devices=plain.get("devices"), log=bool(plain.get("log", True)),
                       timeout_s=plain.get("timeout_s"), retries=plain.get("retries"), add=add)
    if not outcome:
        print(f"[backfill] nothing to do: every export of {run.root} has a result")
    for step, what in sorted(outcome.items()):
        print(f"[backfill] step {step}: {what}")
    return 0 if all(v == "ok" for v in outcome.values()) else 1
