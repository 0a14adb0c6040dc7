"""What a training run prints: ifdistill's own lines on the console, every library's chatter in a file.

A researcher watching a run wants its progress, each checkpoint's scores, errors and the final table.
The libraries underneath print far more -- Lightning's accelerator lines and tips, DeepSpeed's
accelerator warning, transformers' loading bars, W&B's notices, Python deprecation warnings -- and in a
terminal that drowns the few lines that matter. :func:`quiet_console` therefore:

- writes every log record at INFO and above (ifdistill's and every library's, Python warnings included
  through :func:`logging.captureWarnings`) to ``<run>/logs/console.log`` (:data:`LOG_FILE`);
- lets the console handlers print only ifdistill's records (loggers ``ifdistill.*``, ``__main__``) and
  any library's errors (:class:`OwnLines`);
- routes the libraries that print through handlers of their own (DeepSpeed, transformers, W&B's terminal
  notices) through the root logger, so the same two rules apply to them, and turns off transformers'
  progress bars.

``verbose=True`` (``run.verbose=true``; ``--verbose`` for ``make demo``) keeps the file and shows
everything on the console as well. Evaluator processes never print to the trainer's console: their
output goes to their own log files in the run directory (``evals/...``), and ``make demo`` sends the
post-training ``ifdistill-eval``'s output to the same ``console.log``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

LOG_FILE = "console.log"
OWN_LOGGERS = ("ifdistill", "__main__")
# Libraries that log through a handler of their own instead of propagating to the root logger.
ROUTED_LOGGERS = ("DeepSpeed",)
WANDB_TERMINAL = "wandb_terminal"  # not under "wandb": W&B's own logger does not propagate
FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


class OwnLines(logging.Filter):
    """Passes ifdistill's records and any record at ERROR or above; the rest is for the log file."""

    def filter(self, record: logging.LogRecord) -> bool:
        own = any(record.name == n or record.name.startswith(n + ".") for n in OWN_LOGGERS)
        return own or record.levelno >= logging.ERROR


class ToRoot(logging.Filter):
    """On a library logger with its own console handler: hand the record to the root logger's handlers
    (the log file, and the console through :class:`OwnLines`) instead of the library's handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        root = logging.getLogger()
        if record.levelno >= root.getEffectiveLevel():
            root.handle(record)
        return False


def _console_handlers(logger: logging.Logger) -> list[logging.Handler]:
    """The handlers that print to the terminal (not a file, not a test's capture buffer)."""
    streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    return [h for h in logger.handlers if type(h) is logging.StreamHandler and h.stream in streams]


class _RunLog(logging.FileHandler):
    """The handler writing a run's console.log (one at a time: a sweep trains its runs in one process).

    A write that fails (a full disk) takes the handler off with one line on stderr, instead of
    logging's traceback per record: the run goes on, and says what it no longer keeps."""

    def handleError(self, record: logging.LogRecord) -> None:
        err = sys.exc_info()[1]
        logging.getLogger().removeHandler(self)
        print(f"ifdistill: {self.baseFilename}: cannot write ({err}); the libraries' output is no longer kept",
              file=sys.stderr, flush=True)


def _adopt(name: str) -> None:
    lg = logging.getLogger(name)
    if not any(isinstance(f, ToRoot) for f in lg.filters):
        lg.addFilter(ToRoot())


def _quiet_transformers(bars: bool) -> None:
    """transformers' own handler off (its records reach the root logger); its progress bars unless ``bars``."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_default_handler()
    hf_logging.enable_propagation()
    if not bars:
        hf_logging.disable_progress_bar()


def _quiet_wandb() -> None:
    """W&B's terminal notices (``wandb: WARNING ...``) become log records instead of stderr lines: those
    before ``wandb.init`` through :data:`WANDB_TERMINAL`, those after it (``WANDB_SILENT``, unless the
    user set it) in W&B's own ``debug.log``."""
    import wandb
    from wandb.errors import term

    os.environ.setdefault("WANDB_SILENT", "true")
    term.termsetup(wandb.Settings(silent=True), logging.getLogger(WANDB_TERMINAL))


def quiet_console(log_dir: str | os.PathLike, *, verbose: bool = False, wandb: bool = False) -> Path:
    """Send every library's INFO output and warnings to ``<log_dir>/console.log``; the console keeps
    ifdistill's lines (all of it with ``verbose``). Idempotent; returns the log file's path."""
    path = (Path(log_dir) / LOG_FILE).absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _RunLog)]:
        if Path(handler.baseFilename) != path:  # the previous run's (a sweep, or tests training in turn)
            root.removeHandler(handler)
            handler.close()
    if not any(isinstance(h, _RunLog) for h in root.handlers):
        handler = _RunLog(path, mode="a", encoding="utf-8")
        handler.setLevel(logging.INFO)
        handler.setFormatter(logging.Formatter(FORMAT))
        root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.INFO:
        root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    for name in ROUTED_LOGGERS:
        _adopt(name)
    _quiet_transformers(bars=verbose)
    if wandb and not verbose:
        _quiet_wandb()
    for handler in _console_handlers(root):
        for f in [f for f in handler.filters if isinstance(f, OwnLines)]:
            handler.removeFilter(f)
        if not verbose:
            handler.addFilter(OwnLines())
    return path
