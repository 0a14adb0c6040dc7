"""``train(config)``: build the data, module, callbacks, loggers and trainer from a
:class:`~ifdistill.train.schemas.TrainConfig`, then fit.

Kept apart from ``@hydra.main`` (``ifdistill/cli/train.py``; the composed tree becomes the typed,
preflight-checked config at :func:`ifdistill.train.config_edge.train_config`) so that tests and scripts call
it with a config of their own. Order matters:

1. everything that shows without a model is checked before the config exists
   (:mod:`ifdistill.train.preflight`), then :func:`check_run_dir`, so a typo fails in seconds and leaves
   no run directory behind;
2. derive the run directory from the config hash, take its lock (:class:`~ifdistill.train.run_lock.RunLock`:
   a second launch on a live run is refused, naming the holder), remove what writers killed mid-write
   left, and look for a checkpoint to resume from (``run.resume``: ``auto`` resumes when one exists,
   ``never`` refuses an existing run, ``required`` fails without one) -- re-running a crashed command
   therefore continues it; a run without checkpoints of its own starts from the newest one of
   ``run.resume_from`` (another run directory: after a divergence, the same run with a changed learning
   rate, :mod:`ifdistill.train.nonfinite`);
3. build the loggers (``logger`` group) and callbacks (checkpointing + the ``callbacks`` group); a run
   whose last launch finished at ``trainer.max_steps`` and whose callbacks have nothing left to do
   (:func:`work_left`: every export evaluated, every evaluation in W&B) returns here, unchanged -- no
   launch entry, no W&B run;
4. build the datamodule, the module (``method`` group, ``_target_`` = the module class) and the
   ``Trainer`` (``trainer`` group, with the strategy it names);
5. ``trainer.fit(..., ckpt_path=<checkpoint>)``; the callbacks reconcile first what earlier launches left
   (the checkpoint-eval callback: :mod:`ifdistill.callbacks.checkpoint_eval`), also when the restored
   step is already ``max_steps``; a non-finite loss, gradient or weight stops it as ``diverged`` (or
   skips the step: ``run.on_nonfinite``); on a requeue signal (SLURM time limit, preemption) the step is
   checkpointed and the job requeued (:mod:`ifdistill.train.preemption`).

Translations made here, so the configs can stay declarative: ``trainer.enable_progress_bar: auto`` is a
bar on a terminal and plain progress lines otherwise (:mod:`ifdistill.train.progress`);
``trainer.precision: auto`` becomes
``bf16-mixed`` on GPUs and ``32-true`` on CPU (where the model is also loaded in float32);
``run.eval_every_n_steps`` becomes Lightning's ``val_check_interval`` in micro-batches; the distributed
sampler is always off (ifdistill's sampler shards, see :mod:`ifdistill.train.datamodule`).
"""

from __future__ import annotations

import inspect
import logging
import os
from pathlib import Path
from typing import Any, Optional

from collections.abc import Mapping

from ifdistill.models import resolve_model_path
from ifdistill.train.schemas import TrainConfig
from ifdistill.config import ConfigError, lookup
from ifdistill.data.records import DataError
from ifdistill.runs.rundir import (HASH_IGNORE, RunDir, RunDirError, RunInfo, checkpoint_step, config_hash,
                                   hashed_config, run_id)
from ifdistill.train.loggers import build_loggers, close_loggers
from ifdistill.train.run_lock import RunLock
from ifdistill.startup_heap import settle
from ifdistill.write_failures import WriteFailed, as_write_failure

log = logging.getLogger(__name__)


def _global_rank() -> int:
    """Lightning's rank rule (``lightning.fabric.utilities.rank_zero._get_rank``), read from the
    environment without importing Lightning, which takes seconds (a duplicate launch is refused first)."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        if os.environ.get(key) is not None:
            return int(os.environ[key])
    return 0


def _on_gpu(trainer: Mapping[str, Any]) -> bool:
    import torch

    accel = str(trainer.get("accelerator", "auto"))
    return accel in ("gpu", "cuda") or (accel == "auto" and torch.cuda.is_available())


def hash_ignore(tree: Mapping[str, Any]) -> list[str]:
    """The keys left out of ``config_hash``: ``run.hash_ignore``, or :data:`~ifdistill.runs.rundir.HASH_IGNORE`."""
    configured = lookup(tree, "run.hash_ignore")
    return list(configured) if configured is not None else list(HASH_IGNORE)


def resolve_run_dir(tree: Mapping[str, Any]) -> tuple[RunDir, str, str]:
    """``(run dir, run id, config hash)`` of a config tree (plain, resolved: :attr:`TrainConfig.tree`): the
    run directory is named by the hash of what the config trains (:mod:`ifdistill.runs.rundir`)."""
    digest = config_hash(tree, hash_ignore(tree))
    rid = run_id(str(lookup(tree, "run.name")), digest)
    runs = Path(str(lookup(tree, "paths.output_root"))) / str(tree["task_name"]) / "runs"
    root = lookup(tree, "run.dir") or runs / rid
    return RunDir(Path(root).absolute()), rid, digest


def refuse_if_running(tree: Mapping[str, Any]) -> None:
    """Refuse at once when a live launch holds this config's run directory (before the slower checks)."""
    if _global_rank() != 0:
        return
    try:
        rd = resolve_run_dir(tree)[0]
    except Exception:  # noqa: BLE001 - a config that cannot resolve: preflight names the problem
        return
    RunLock(rd.lock_file).check()


def check_run_dir(config: TrainConfig) -> None:
    """Raise :class:`~ifdistill.runs.rundir.RunDirError` when the run directory cannot take this launch (after
    preflight, before anything is written): it holds another config's run (the error names the keys
    that changed), ``run.resume=never`` meets a run there, or ``run.resume=required`` no checkpoint.
    Rank 0 checks (the other ranks start when rank 0's launch has written the run)."""
    if _global_rank() != 0:
        return
    rd, rid, digest = resolve_run_dir(config.tree)
    rd.check_config(config.tree, digest, hash_ignore(config.tree))
    resume = str(config.run.resume)
    if resume not in ("never", "required"):
        return
    from ifdistill.train.checkpointing import find_resume_checkpoint

    ckpt = find_resume_checkpoint(rd.checkpoints)
    if resume == "never" and (rd.is_run() or ckpt is not None):
        raise RunDirError(f"run {rid} already exists at {rd.root} and run.resume=never")
    if resume == "required" and ckpt is None:
        raise RunDirError(f"run.resume=required but {rd.checkpoints} holds no complete checkpoint")


#: What training gives a callback of the ``callbacks`` group whose constructor takes it, and from where; a
#: callback section that sets one is refused by preflight (the value would be replaced unseen).
SUPPLIED_TO_CALLBACKS = {"run": "the run it starts (its RunInfo)"}


def _callbacks(config: TrainConfig, run: RunInfo, *, progress_bar: bool, started_elsewhere: bool = False) -> list:
    """The divergence guard, checkpointing and requeue handling, then the ``callbacks`` group; a callback
    whose constructor takes ``run`` is given the :class:`~ifdistill.runs.rundir.RunInfo` of this run."""
    from hydra.utils import get_class, instantiate

    from ifdistill.train.checkpointing import StepCheckpoint
    from ifdistill.train.nonfinite import ConfiguredLearningRate, NonFiniteGuard
    from ifdistill.train.preemption import RequeueOnSignal

    from ifdistill.train.progress import ProgressLog, StepProgressBar

    checkpoint = StepCheckpoint(run.dir.checkpoints, every_n_steps=config.run.checkpoint_every_n_steps,
                                keep_last=config.run.keep_last_checkpoints)
    # first: a non-finite step stops before any later callback exports or evaluates its weights
    guard = NonFiniteGuard(config.run.on_nonfinite, config.run.max_skipped_steps, run)
    callbacks = [guard, checkpoint, RequeueOnSignal(checkpoint)]
    if started_elsewhere:  # run.resume_from: this run's learning rate, not the restored one
        callbacks.append(ConfiguredLearningRate())
    if progress_bar:
        callbacks.append(StepProgressBar())
    else:  # a log, not a terminal: plain progress lines instead of a bar
        callbacks.append(ProgressLog(int(config.trainer.get("log_every_n_steps", 10))))
    for name, node in config.callbacks.items():
        if isinstance(node, Mapping) and node.get("_target_"):
            log.debug("callback %s: %s", name, node["_target_"])
            takes_run = "run" in inspect.signature(get_class(str(node["_target_"]))).parameters
            # resolved plain values, never the tree (a nested _target_ stays a plain dict under _recursive_: false);
            # the run is given afterwards, so it stays the object it is
            build = instantiate(node, _convert_="all", _partial_=True)
            callbacks.append(build(run=run) if takes_run else build())
    return callbacks


def build_module(config: TrainConfig, *, val_names: list[str], on_gpu: bool):
    """The LightningModule the ``method`` section's ``_target_`` names, given its settings object and what
    training supplies from the other sections (:class:`~ifdistill.train.method.TrainingInputs`)."""
    from ifdistill.train.method import TrainingInputs, method_class, method_settings

    inputs = TrainingInputs(model=config.section("model"), peft=config.section("peft"),
                            optim=config.section("optim"), seed=config.seed, val_names=tuple(val_names),
                            dtype=None if on_gpu else "float32", gradient_checkpointing=config.gradient_checkpointing,
                            logit_chunk_size=config.logit_chunk_size, validate_at_start=config.run.validate_at_start,
                            drift_from_base=config.run.drift_from_base, kernels=config.section("kernels"))
    return method_class(config.method)(inputs, method_settings(config.method))


def resolve_data(config: TrainConfig):
    """The data and model sections as the data layer reads them, with the teacher views the method asks
    for (one typed object)."""
    from ifdistill.data.build import DataConfig
    from ifdistill.train.method import teacher_views_of

    return DataConfig.resolve(config.data, icl=teacher_views_of(config.method), model=config.section("model"))


def build_datamodule(config: TrainConfig, rd: Optional[RunDir] = None, data=None):
    from ifdistill.train.datamodule import TrainDataModule
    from ifdistill.train.method import method_class

    data = data if data is not None else resolve_data(config)
    return TrainDataModule(data, config.section("model"), method=method_class(config.method),
                           manifest_path=str(rd.manifest) if rd is not None else None,
                           **config.section("datamodule"))


def start_checkpoint(origin: Path, digest: str) -> Path:
    """The checkpoint of run directory ``origin`` (``run.resume_from``) where a new run (another config
    hash: a changed learning rate after a divergence) starts: its newest, or the one it started from
    (:func:`~ifdistill.train.nonfinite.last_finite_checkpoint`); read, never changed."""
    from ifdistill.train.nonfinite import last_finite_checkpoint

    ckpt = last_finite_checkpoint(RunDir(origin))
    if ckpt is None:
        raise ConfigError(f"run.resume_from: {origin / 'checkpoints'} holds no complete checkpoint")
    meta = RunDir(origin).read_meta() or {}
    log.warning("starting from %s of run %s (config hash %s); this run's config hash is %s: a new run",
                ckpt, meta.get("run_id", origin.name), str(meta.get("config_hash", "?"))[:12], digest[:12])
    return ckpt


def failure_line(err: BaseException) -> str:
    """One line for a launch's failure: the message of an error that is the user's to fix (it names the
    setting, file or row), else the error's type and message."""
    text = " ".join(str(err).split())
    return text if isinstance(err, (ConfigError, DataError, WriteFailed)) else f"{type(err).__name__}: {text}"


def build_trainer(trainer: Mapping[str, Any], overrides: dict[str, Any]):
    """The ``trainer`` group with this run's callbacks, loggers and translations. Lightning refuses a
    trainer this machine cannot run (``trainer.accelerator=gpu`` without a GPU, an unknown strategy) with
    a ``MisconfigurationException``; that is the user's to fix, so it is a :class:`ConfigError` naming
    the trainer settings."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        return instantiate(trainer, **overrides)
    except InstantiationException as err:  # Hydra wraps what the Trainer raised
        if not isinstance(err.__cause__, MisconfigurationException):
            raise
        settings = ", ".join(f"trainer.{k}={trainer.get(k)}" for k in ("accelerator", "devices", "strategy")
                             if trainer.get(k) is not None)
        raise ConfigError(f"{settings}: this machine cannot run it: {err.__cause__}") from None


def train(config: TrainConfig, *, checked: bool = False) -> dict[str, Any]:
    """Train as configured; returns run id, hash, run dir, final step and the last logged metrics.

    ``config`` passed preflight when it was made (:func:`ifdistill.train.config_edge.train_config`). ``checked``:
    :func:`check_run_dir` passed too (the CLI runs it first)."""
    from ifdistill.console import quiet_console
    from ifdistill.train.progress import single_log_output

    if not checked:
        refuse_if_running(config.tree)
        check_run_dir(config)
    single_log_output()
    from ifdistill.train.method import method_class

    def build() -> tuple[Any, Any, bool]:
        dm = build_datamodule(config)
        dm.setup("fit")
        gpu = _on_gpu(config.trainer)
        return dm, build_module(config, val_names=dm.val_names, on_gpu=gpu), gpu

    method = method_class(config.method)
    if method.works_alone(config):  # e.g. the teacher pass alone: no run directory
        settle()  # the heavy modules are in: freeze them, resume the collector (ifdistill.startup_heap)
        return method.run_alone(config, build)
    rd, rid, digest = resolve_run_dir(config.tree)
    quiet_console(rd.logs, verbose=config.run.verbose,
                  wandb=str((config.logger or {}).get("_target_") or "").endswith("WandbLogger"))
    lock = RunLock(rd.lock_file) if _global_rank() == 0 else None  # other ranks run under rank 0's lock
    if lock is not None:
        lock.acquire()
    try:
        return _train_locked(config, rd, rid, digest, lock)
    except Exception as err:  # recorded as the launch's failure (ifdistill-status shows the cause), then raised
        written = as_write_failure(err, near=rd.root)  # a full disk or a refused write: one line, the same here
        if lock is not None and type(err).__name__ != "TrainingDiverged":  # a divergence is recorded as such
            try:
                rd.mark_failed(failure_line(written or err))
            except OSError as also:  # run.json itself could not be written: the first error is the one to tell
                log.warning("run %s: the failure could not be recorded in run.json (%s)", rid, also)
        if written is not None and written is not err:
            raise written from err
        raise
    finally:
        if lock is not None:
            lock.release()


def _train_locked(config: TrainConfig, rd: RunDir, rid: str, digest: str, lock: Optional[RunLock]) -> dict[str, Any]:
    import lightning.pytorch as pl

    from ifdistill.results import run_metrics
    from ifdistill.train.checkpointing import find_resume_checkpoint
    from ifdistill.train.nonfinite import TrainingDiverged, record_divergence
    from ifdistill.train.method import method_class
    from ifdistill.train.preemption import RequeueOnSignal, TrainingPreempted
    from ifdistill.train.progress import want_progress_bar
    from ifdistill.runs.sweeps import swept_values

    data = resolve_data(config)  # checked by preflight; resolved once for the datamodule
    if lock is not None:  # what writers killed mid-write left; the lock holder's writers are gone
        for left in rd.remove_leftovers() + run_metrics.remove_leftovers(rd.root):
            log.warning("run %s: removed %s, left by a write that never finished", rid, left)
    # the lock holder sets incomplete or unreadable checkpoints aside before choosing one
    # (run.resume was checked by check_run_dir)
    ckpt = find_resume_checkpoint(rd.checkpoints, set_aside=lock is not None)
    elsewhere = ckpt is None and bool(config.run.resume_from)
    if elsewhere:
        ckpt = start_checkpoint(Path(str(config.run.resume_from)), digest)
    run = RunInfo(rd, run_id=rid, config_hash=digest, seed=config.seed, method=method_class(config.method).__name__,
                  base_model=resolve_model_path(config.model.name_or_path))
    # W&B's run is created by the first log, after the trainer exists
    loggers = build_loggers(config.logger, rd, rid, group=config.run.group)
    bar = want_progress_bar(config.trainer.get("enable_progress_bar", "auto"))
    callbacks = _callbacks(config, run, progress_bar=bar, started_elsewhere=elsewhere)
    left = work_left(config, rd, ckpt, callbacks, loggers) if lock is not None and _one_process() else None
    if left == []:  # a finished run with nothing missing: nothing is launched, nothing changes
        log.warning("run %s in %s is finished (step %s) and nothing is missing: nothing to do", rid, rd.root,
                    checkpoint_step(ckpt))
        return _result(rid, digest, rd, checkpoint_step(ckpt), ckpt, nothing_to_do=True)
    if lock is not None:
        rd.write_launch(config.tree, run_id=rid, digest=digest, ignore=hash_ignore(config.tree),
                        resumed_from=str(ckpt) if ckpt else None, took_over_lock=lock.took_over)
        if lock.took_over:
            log.warning("run %s: took over the lock of a launch that is gone (%s)", rid, lock.took_over)
        log.info("run %s in %s%s", rid, rd.root, f", resuming from {ckpt.name}" if ckpt else "")
        if left:
            log.warning("run %s finished earlier; this launch completes it: %s", rid, "; ".join(left))
    pl.seed_everything(config.seed, workers=True, verbose=False)

    gpu = _on_gpu(config.trainer)
    dm = build_datamodule(config, rd, data)
    module = build_module(config, val_names=dm.val_names, on_gpu=gpu)

    accumulate = int(config.trainer.get("accumulate_grad_batches", 1))
    overrides: dict[str, Any] = dict(callbacks=callbacks, logger=loggers or False,
                                     default_root_dir=str(rd.root), use_distributed_sampler=False,
                                     enable_progress_bar=bar)
    if str(config.trainer.get("precision", "auto")) == "auto":
        overrides["precision"] = "bf16-mixed" if gpu else "32-true"
    if dm.val_names:
        overrides.update(val_check_interval=config.run.eval_every_n_steps * accumulate,
                         check_val_every_n_epoch=None)
    else:
        overrides["limit_val_batches"] = 0
    failed, preempted = True, None
    try:
        trainer = build_trainer(config.trainer, overrides)
        hashed = hashed_config(config.tree, hash_ignore(config.tree))
        for lg in loggers:  # the config that defines the run, with its identity, in every logger (W&B config)
            # sweep/<key>: what ifdistill.cli.wandb_view groups by
            lg.log_hyperparams({"run_id": rid, "config_hash": digest, **hashed, **swept_values(config.tree)})
        settle()  # the heavy modules are in: freeze them, resume the collector (ifdistill.startup_heap)
        trainer.fit(module, datamodule=dm, ckpt_path=str(ckpt) if ckpt else None)
        failed = False
    except TrainingDiverged as stop:  # recorded, then ifdistill-train prints its line and exits 3
        if trainer.is_global_zero:
            record_divergence(rd, stop, loggers)
        raise
    except TrainingPreempted as stop:  # a requeue signal: the step is checkpointed (ifdistill.train.preemption)
        preempted, failed = stop, False  # its W&B run continues after the requeue
        if trainer.is_global_zero:
            rd.mark_stopped(stop.step, str(stop))
        log.warning("run %s %s; handing it back for a requeue", rid, stop)
        requeue = next(c for c in trainer.callbacks if isinstance(c, RequeueOnSignal))
        done = requeue.requeue(stop, global_rank=trainer.global_rank, loggers=loggers)  # submitit: exits here
        log.warning("run %s: %s", rid, done)
    finally:  # this launch's W&B run ends with it: the next job of a sweep opens its own
        close_loggers(loggers, failed=failed)
    if trainer.is_global_zero and not trainer.interrupted and preempted is None:
        rd.mark_finished(trainer.global_step)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    return _result(rid, digest, rd, trainer.global_step, ckpt, preempted=preempted is not None, metrics=metrics,
                   teacher_pass=getattr(module, "teacher_pass_stats", None))


def _result(rid: str, digest: str, rd: RunDir, step: Optional[int], ckpt: Optional[Path], *, preempted: bool = False,
            metrics: Optional[dict] = None, teacher_pass: Any = None, nothing_to_do: bool = False) -> dict[str, Any]:
    """What :func:`train` returns (the CLI prints it but ``metrics``)."""
    return {"run_id": rid, "config_hash": digest, "run_dir": str(rd.root), "global_step": step,
            "resumed_from": str(ckpt) if ckpt else None, "preempted": preempted, "metrics": metrics or {},
            "teacher_pass": teacher_pass, "nothing_to_do": nothing_to_do}


def _one_process() -> bool:
    """No other rank of this launch started with this one (srun's tasks do; Lightning starts its ranks
    later, in ``fit``): a launch that ends before ``fit`` leaves no rank waiting for it."""
    return all(int(os.environ.get(key) or 1) <= 1 for key in ("WORLD_SIZE", "SLURM_NTASKS"))


def work_left(config: TrainConfig, rd: RunDir, ckpt: Optional[Path], callbacks: list,
              loggers: list) -> Optional[list[str]]:
    """What relaunching a finished run would still do, one line each (empty: nothing); None when the run
    is not finished -- its last launch did not record its end at ``trainer.max_steps``, or the newest
    checkpoint is not that step's -- so the launch trains. Each callback that can say what a launch at a
    step would do answers ``work_left(step, max_steps, loggers)``
    (:meth:`ifdistill.callbacks.checkpoint_eval.CheckpointEvalCallback.work_left`)."""
    last = ((rd.read_meta() or {}).get("launches") or [{}])[-1]
    step, max_steps = checkpoint_step(ckpt) if ckpt else None, int(config.trainer.get("max_steps") or -1)
    if not last.get("finished") or step is None or step != max_steps or last.get("final_step") != step:
        return None
    return [line for cb in callbacks if callable(getattr(cb, "work_left", None))
            for line in cb.work_left(step, max_steps, loggers)]
