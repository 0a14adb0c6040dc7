"""The quiet console: ifdistill's lines and any error on the terminal, every library's output in console.log."""

from __future__ import annotations

import io
import logging
import sys
import warnings

import pytest

from ifdistill.console import LOG_FILE, OwnLines, ToRoot, _RunLog, quiet_console

RECORDS = [  # (logger, level, message, shown on a quiet console)
    ("ifdistill.train.run", logging.INFO, "run demo-1 in /runs/demo-1", True),
    ("lightning.pytorch.utilities.rank_zero", logging.INFO, "Tip: try litlogger", False),
    ("transformers.modeling_utils", logging.WARNING, "some weights were not used", False),
    ("vllm.engine", logging.INFO, "KV cache 65,536 tokens", False),
    ("vllm.engine", logging.ERROR, "engine died", True),
]


@pytest.fixture
def console():
    """The terminal (a buffer the test makes sys.stderr), a handler on the root logger printing to it
    (what Hydra configures) and DeepSpeed's own handler; yields the buffer. Everything quiet_console adds
    is taken off again afterwards."""
    screen = io.StringIO()
    root = logging.getLogger()
    terminal = logging.StreamHandler(screen)
    terminal.setFormatter(logging.Formatter("%(message)s"))
    deepspeed = logging.getLogger("DeepSpeed")
    ds_handler = logging.StreamHandler(screen)  # as DeepSpeed's logger factory adds at import
    level, ds_propagate = root.level, deepspeed.propagate
    # Earlier tests in this pytest process import the libraries (vLLM, lm-eval) whose own logging set-up gives
    # their loggers handlers, levels or no propagation; a trainer never imports vLLM (its evaluators are
    # separate processes writing their own logs), so each library here stands as one that logs to the root.
    # (Lightning, imported while the root logger has no handler, gives "lightning.pytorch" its own handler and
    # no propagation: every dotted prefix of a library's logger is reset.)
    libraries = sorted({".".join(name.split(".")[:i + 1]) for name, *_ in RECORDS if not name.startswith("ifdistill")
                        for i in range(name.count(".") + 1)})
    saved = {n: (lg.propagate, list(lg.handlers), lg.level, lg.disabled)
             for n in libraries for lg in [logging.getLogger(n)]}
    for n in libraries:
        lg = logging.getLogger(n)
        lg.propagate, lg.disabled = True, False
        lg.setLevel(logging.NOTSET)
        for h in list(lg.handlers):
            lg.removeHandler(h)
    # A run trained earlier in this process leaves logging's warnings capture on while pytest's per-test
    # catch_warnings has since restored the original showwarning: captureWarnings(True) would then do nothing.
    logging.captureWarnings(False)
    root.addHandler(terminal)
    deepspeed.addHandler(ds_handler)
    deepspeed.propagate = False
    yield screen
    for h in [h for h in root.handlers if isinstance(h, _RunLog)] + [terminal]:
        root.removeHandler(h)
        h.close()
    deepspeed.removeHandler(ds_handler)
    deepspeed.propagate = ds_propagate
    for f in [f for f in deepspeed.filters if isinstance(f, ToRoot)]:
        deepspeed.removeFilter(f)
    root.setLevel(level)
    logging.captureWarnings(False)
    for n, (propagate, handlers, lvl, disabled) in saved.items():
        lg = logging.getLogger(n)
        lg.propagate, lg.disabled = propagate, disabled
        lg.setLevel(lvl)
        for h in handlers:
            lg.addHandler(h)


def _emit() -> None:
    for name, level, message, _ in RECORDS:
        logging.getLogger(name).log(level, message)
    logging.getLogger("DeepSpeed").warning("Setting accelerator to CPU.")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        logging.captureWarnings(True)  # catch_warnings restores showwarning on entry's value: set again
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated", DeprecationWarning, stacklevel=1)


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_console_shows_ifdistills_lines_and_the_log_file_everything(tmp_path, console, verbose, monkeypatch):
    monkeypatch.setattr(sys, "stderr", console)  # in the test: pytest's capture resets it after fixtures
    path = quiet_console(tmp_path / "logs", verbose=verbose)
    _emit()
    shown = console.getvalue().splitlines()
    logged = path.read_text()
    everything = [m for _, _, m, _ in RECORDS] + ["Setting accelerator to CPU.", "is deprecated"]
    assert path == (tmp_path / "logs" / LOG_FILE).absolute()
    assert all(m in logged for m in everything), logged
    expected = everything if verbose else [m for _, _, m, own in RECORDS if own]
    shown = [ln for ln in shown if ln.strip() and not ln.startswith("  warnings.warn(")]  # a warning: + its source
    assert len(shown) == len(expected) and all(m in line for m, line in zip(expected, shown)), shown


def test_a_second_run_in_the_same_process_logs_to_its_own_file(tmp_path, console):
    first = quiet_console(tmp_path / "a")
    second = quiet_console(tmp_path / "b")
    logging.getLogger("lightning").info("second run's line")
    assert "second run's line" in second.read_text() and "second run's line" not in first.read_text()
    assert sum(isinstance(h, _RunLog) for h in logging.getLogger().handlers) == 1


def test_own_lines_filter():
    record = lambda name, level: logging.LogRecord(name, level, __file__, 1, "m", None, None)  # noqa: E731
    f = OwnLines()
    assert f.filter(record("ifdistill", logging.INFO)) and f.filter(record("ifdistill.callbacks.x", logging.INFO))
    assert not f.filter(record("ifdistillery", logging.INFO)) and not f.filter(record("vllm", logging.WARNING))
    assert f.filter(record("vllm", logging.ERROR))


def test_a_log_file_that_cannot_be_written_is_one_line_not_a_traceback_per_record(tmp_path, console, monkeypatch):
    monkeypatch.setattr(sys, "stderr", console)
    path = quiet_console(tmp_path / "logs")
    (handler,) = [h for h in logging.getLogger().handlers if isinstance(h, _RunLog)]
    handler.stream.close()  # as a write on a full disk fails
    logging.getLogger("lightning").info("first")
    logging.getLogger("lightning").info("second")
    assert console.getvalue().splitlines() == [f"ifdistill: {path}: cannot write (I/O operation on closed file.); "
                                               "the libraries' output is no longer kept"]
    assert handler not in logging.getLogger().handlers
