"""What every command line shares: a mistake is one line naming the program and the problem, exit 2.

- An argument the program's parser refuses (:class:`ArgumentParser`; argparse's own answer is the usage
  text, then the error; the usage stays one ``--help`` away).
- An override of a Hydra program: Hydra reports a composition error (``method=sftt``, an unknown key, an
  override that does not parse) in a dozen lines and exits 1, after its app has been entered.
  ``ifdistill-train`` and ``ifdistill-eval`` compose their config from the same overrides first
  (:func:`refuse_bad_overrides`), so such a mistake is refused before anything is created. Under ``-m`` the sweep's first job is composed, and one job per
other value of each swept key (``method=sft,sftt`` refuses ``sftt``), not every combination. Other
Hydra flags (``--help``, ``--cfg``, ``--config-dir`` ...) are left to Hydra.
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Optional, Sequence

MULTIRUN_FLAGS = ("-m", "--multirun")


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose error is one line, exit 2 (module docstring)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (--help shows the usage)", file=sys.stderr)
        sys.exit(2)


def one_line(err: BaseException) -> str:
    """An error as one line: its first line, and the key OmegaConf names on a later one (``full_key: ...``);
    for a config group option that does not exist (``method=sftt``), the options that do (Hydra lists them
    on later lines), shared bases (``_base``) left out."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    key = next((line.removeprefix("full_key:").strip() for line in lines[1:] if line.startswith("full_key:")), "")
    text = (lines[0] if lines else type(err).__name__) + (f" (key {key})" if key and key not in lines[0] else "")
    options = [str(o) for o in getattr(err, "options", None) or () if not str(o).startswith("_")]
    if options:
        text += f" (known: {', '.join(sorted(options))})"
    cause = err.__cause__
    return f"{text.rstrip('.')}: {one_line(cause)}" if cause is not None and str(cause).strip() else text


def compose(config_name: str, overrides: Sequence[str] = ()):
    """The packaged config ``config_name`` (``ifdistill.conf``) with command-line style ``overrides``,
    without running Hydra's app (``${hydra:...}`` is unavailable in it)."""
    from hydra import compose as hydra_compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module("ifdistill.conf", version_base="1.3"):
        return hydra_compose(config_name, overrides=list(overrides))


def jobs_to_check(argv: Sequence[str]) -> list[list[str]]:
    """The overrides of the jobs whose composition stands for every job that ``argv`` launches: the first
    job (each swept key at its first value), then, for each swept key, one job per other value of it with
    the rest as in the first. Empty where a Hydra flag other than ``-m`` asks Hydra for something else."""
    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in argv):
        return []
    overrides = [a for a in argv if a not in MULTIRUN_FLAGS]
    if len(overrides) == len(argv):
        return [overrides]
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    values = [list(o.sweep_string_iterator()) if o.is_sweep_override() else [None] for o in parsed]

    def job(varied: int = -1, value: Optional[str] = None) -> list[str]:
        lines = []
        for i, (override, options) in enumerate(zip(parsed, values)):
            chosen = value if i == varied else options[0]
            lines.append(override.input_line if chosen is None else f"{override.get_key_element()}={chosen}")
        return lines

    return [job(), *(job(i, v) for i, options in enumerate(values) for v in options[1:])]


def refuse_bad_overrides(prog: str, config_name: str, argv: Sequence[str]) -> None:
    """Compose ``config_name`` for :func:`jobs_to_check`; a composition error is ``prog: error: ...`` on one
    line and exit 2 (module docstring)."""
    try:
        for job in jobs_to_check(argv):
            compose(config_name, job)
    except Exception as err:  # noqa: BLE001 - Hydra's and OmegaConf's composition errors, whatever their class
        print(f"{prog}: error: {one_line(err)}", file=sys.stderr, flush=True)
        sys.exit(2)
    finally:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
