"""``ifdistill-train``: the Hydra entry point. The tree becomes a checked ``TrainConfig`` at
:func:`ifdistill.train.config_edge.train_config`; all the rest is :func:`ifdistill.train.run.train`.

Examples::

    ifdistill-train experiment=demo
    ifdistill-train model=qwen3_1.7b method=distill trainer=deepspeed_stage_2 trainer.devices=2
    ifdistill-train experiment=demo trainer=ddp trainer.devices=2     # 2 CPU processes (gloo)
    ifdistill-train -m experiment=ifeval_replay_sweep hydra/launcher=slurm   # 24 runs as a SLURM array
    ifdistill-train method=distill method.demos=per_example method.teacher_source=cache +teacher_pass.only=true

Re-running the same command after a crash resumes the run from its newest complete checkpoint (the
run directory is named by the config hash, see :mod:`ifdistill.runs.rundir`). A mistake the user can
fix -- a config value, a data file, a model that is not here, a run directory in use, a full disk -- is
printed as one line and exits 2 (``HYDRA_FULL_ERROR=1`` shows the traceback); a run that diverged
(a non-finite loss, gradient or weight, :mod:`ifdistill.train.nonfinite`) prints one line and exits 3.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ifdistill.command_line import refuse_bad_overrides
from ifdistill.evaluator.launch import record_launch_threads
from ifdistill.startup_heap import pause_collector
from ifdistill.runs.sweeps import jobs_share_process

def user_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix and say so in their message: printed as one line, no traceback."""
    from ifdistill.config import ConfigError
    from ifdistill.data.records import DataError
    from ifdistill.models import ModelUnavailableError
    from ifdistill.train.run_lock import RunLockedError
    from ifdistill.write_failures import WriteFailed

    # DataError: a bad row past the rows preflight samples (it names file, line and field)
    errors: list[type[BaseException]] = [ConfigError, DataError, ModelUnavailableError, RunLockedError, WriteFailed]
    checkpointing = sys.modules.get("ifdistill.train.checkpointing")  # loaded if it raised (importing it
    if checkpointing is not None:                                      # here would load Lightning: seconds)
        errors.append(checkpointing.CheckpointWriteError)
    method = sys.modules.get("ifdistill.train.method")  # a method's own input or file (a damaged teacher cache)
    if method is not None:
        errors.append(method.MethodError)
    return tuple(errors)


def diverged() -> tuple[type[BaseException], ...]:
    """:class:`~ifdistill.train.nonfinite.TrainingDiverged` when training got as far as loading it."""
    module = sys.modules.get("ifdistill.train.nonfinite")
    return (module.TrainingDiverged,) if module is not None else ()


def main() -> None:
    """The console script: the command line's overrides composed first (a mistake in a group option, key or
    value is one line, exit 2, before Hydra starts: :mod:`ifdistill.command_line`), then Hydra's app.
    The collector is paused until training starts (:mod:`ifdistill.startup_heap`)."""
    pause_collector()
    record_launch_threads(os.environ)  # before Lightning's DDP sets OMP_NUM_THREADS for its ranks
    refuse_bad_overrides("ifdistill-train", "train", sys.argv[1:])
    _app()


@hydra.main(version_base="1.3", config_path="pkg://ifdistill.conf", config_name="train")
def _app(cfg: DictConfig) -> None:
    try:
        _main(cfg)
    except diverged() as err:  # recorded in the run directory already; one line on rank 0, exit 3
        from lightning.fabric.utilities.rank_zero import _get_rank

        from ifdistill.train.nonfinite import EXIT_DIVERGED

        _fail(f"{err}", EXIT_DIVERGED, show=int(_get_rank() or 0) == 0)
    except user_errors() as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        _fail(f"error: {' '.join(str(err).split())}", 2)
    except Exception as err:  # any other write of the job refused for lack of space or permission: one line
        from ifdistill.write_failures import as_write_failure

        written = as_write_failure(err, near=cfg.paths.get("output_root"))
        if written is None or os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        _fail(f"error: {written}", 2)


def _fail(message: str, exit_code: int, *, show: bool = True) -> None:
    """End a failed job: its one line (naming the job in a sweep; ``show``: this rank prints it), then the
    exit code -- or, where the sweep's jobs share this process, a record for the sweep's closing line
    (:class:`ifdistill.runs.sweeps.SweepOutcome`) and a return, so that the sweep's next job runs."""
    from ifdistill.runs.sweeps import job_label, record_failed_job

    label = job_label()
    if show:
        print(f"ifdistill-train: {label + ': ' if label else ''}{message}", file=sys.stderr, flush=True)
    if not jobs_share_process():
        sys.exit(exit_code)
    record_failed_job(label or "job", exit_code)


def _main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from ifdistill.runs.rundir import RUN_DIR_LINK, resolved_tree
    from ifdistill.runs.sweeps import check_launch
    from ifdistill.train.method import method_hooks
    from ifdistill.train.config_edge import train_config
    from ifdistill.train.run import check_run_dir, refuse_if_running, resolve_run_dir, train

    tree = resolved_tree(cfg)
    refuse_if_running(tree)  # a duplicate launch is refused before the slower checks
    config = train_config(tree)  # preflight: before anything is written or loaded
    check_run_dir(config)
    check_launch(config.trainer)
    # The Hydra job dir (a sweep's <n>_<overrides>/) points at the run it trains (ifdistill-status).
    job_dir = Path(HydraConfig.get().runtime.output_dir)
    job_dir.mkdir(parents=True, exist_ok=True)
    if not method_hooks(config.method).works_alone(config):  # work done instead of training has no run
        (job_dir / RUN_DIR_LINK).write_text(str(resolve_run_dir(config.tree)[0].root) + "\n")
    result = train(config, checked=True)
    from lightning.fabric.utilities.rank_zero import _get_rank

    if int(_get_rank() or 0) == 0:
        print(json.dumps({k: v for k, v in result.items() if k != "metrics"}, default=str))


if __name__ == "__main__":
    main()
