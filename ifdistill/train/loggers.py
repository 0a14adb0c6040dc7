"""The ``logger`` group of one run: built for the run's id, closed when its launch ends.

Each launch owns its loggers from :func:`build_loggers` to :func:`close_loggers`. That matters in a
Hydra multirun on the local launcher, where the jobs of a sweep train one after another in one
process: ``wandb`` keeps a process-wide current run, and Lightning's ``WandbLogger`` *reuses*
``wandb.run`` when one is open. Without closing, the second job of a sweep would write its history
into the first job's W&B run and overwrite its config. So a launch finishes its own W&B run when it
ends (finished, stopped, failed or diverged), and a W&B run still open when a launch starts -- left by
code that did not close it -- is finished before the new one is created.

The W&B run id is ifdistill's run id with ``resume="allow"``: a requeued or resumed launch continues
its own W&B run, in the run directory's ``logs/wandb``. The CSV logger writes under the run's own
``logs/`` and holds no process-wide state.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from ifdistill.runs.rundir import RunDir

log = logging.getLogger(__name__)


def is_wandb(logger: Any) -> bool:
    return type(logger).__name__ == "WandbLogger"


def build_loggers(logger: Optional[Mapping[str, Any]], rd: RunDir, rid: str, *, group: Optional[str] = None) -> list:
    """The ``logger`` section (resolved, plain) for run ``rid``: W&B resumes the run of that id, in ``group``."""
    from hydra.utils import instantiate

    if not logger or not logger.get("_target_"):
        return []
    kwargs: dict[str, Any] = {"save_dir": str(rd.logs)}
    if str(logger["_target_"]).endswith("WandbLogger"):
        finish_open_wandb_run(rid)
        kwargs.update(id=rid, name=rid, resume="allow")
        if group:
            kwargs["group"] = str(group)
    return [instantiate(dict(logger), **kwargs)]


def finish_open_wandb_run(rid: str) -> None:
    """Finish the process's current W&B run, if any, before run ``rid`` creates its own."""
    import sys

    wandb = sys.modules.get("wandb")  # not imported: no run can be open
    if wandb is None or getattr(wandb, "run", None) is None:
        return
    log.warning("a W&B run (%s) was still open in this process; finishing it before run %s starts its own",
                wandb.run.id, rid)
    wandb.finish()


def close_loggers(loggers: Iterable[Any], *, failed: bool = False) -> None:
    """Flush every logger and finish the W&B runs this launch opened (exit code 1 when it ``failed``:
    W&B then shows the run as crashed rather than finished). A logger whose experiment was never created
    (another rank, or nothing logged) is left alone."""
    for logger in loggers:
        if is_wandb(logger):
            run = getattr(logger, "_experiment", None)
            if run is not None and hasattr(run, "finish"):
                run.finish(exit_code=1 if failed else 0)
        elif hasattr(logger, "save"):
            logger.save()
