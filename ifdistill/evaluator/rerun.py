"""``ifdistill-eval rerun <eval dir> [KEY=VALUE ...]``: evaluate again exactly as a finished evaluation did.

The evaluation's results.json records its whole configuration (``config``: the resolved ``eval`` section,
the ``model`` section, ``export_dir`` / ``adapter_dir`` / ``export_kind``); a rerun evaluates with that
configuration, so the same model gives the same ``eval_config_hash`` and byte-identical samples.jsonl.
Overrides change what is evaluated or where it goes, e.g. ``export_dir=<another checkpoint>``,
``model.name_or_path=<the base model>`` with ``export_dir=null`` (the base model "exactly like the run's
evaluations", the page's base row), ``output_dir=...`` (default ``<eval dir>/rerun``), ``overwrite=true``;
a change under ``eval.`` makes another configuration (and another hash), as it should.

A directory without a results.json, an override that does not parse and any input error of the evaluation
itself are one line and exit 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, Sequence

from omegaconf import OmegaConf

USAGE = "usage: ifdistill-eval rerun EVAL_DIR [export_dir=...|model.name_or_path=...] [output_dir=...] [overwrite=true]"
#: results.json ``config`` keys that are ``ifdistill-eval``'s own top-level keys.
RECORDED = ("eval", "model", "adapter_dir", "export_dir", "export_kind")


def rerun_config(eval_dir: str | os.PathLike, overrides: Sequence[str] = ()) -> OmegaConf:
    """The ``ifdistill-eval`` config of the evaluation in ``eval_dir``, with ``overrides`` applied."""
    from ifdistill.evaluator.output import read_results_json

    recorded = read_results_json(eval_dir).get("config") or {}
    cfg = OmegaConf.create({k: recorded.get(k) for k in RECORDED})
    cfg.output_dir = str(Path(eval_dir) / "rerun")
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(overrides)))


def main(argv: Optional[Sequence[str]] = None) -> int:
    from ifdistill.command_line import one_line
    from ifdistill.evaluator.cli import _quiet, _summary, eval_config
    from ifdistill.evaluator.errors import input_errors
    from ifdistill.evaluator.output import RESULTS_FILE, EvalOutputError
    from ifdistill.evaluator.run import evaluate

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or "=" in args[0] or args[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        cfg = rerun_config(args[0], args[1:])
        _quiet(cfg)
        results = evaluate(eval_config(cfg))
    except (EvalOutputError, FileNotFoundError, *input_errors()) as err:
        print(f"ifdistill-eval rerun: error: {one_line(err)}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - omegaconf's grammar errors of an override
        if type(err).__module__.startswith("omegaconf"):
            print(f"ifdistill-eval rerun: error: {one_line(err)}", file=sys.stderr)
            return 2
        raise
    print(_summary(results))
    print(f"  results: {Path(str(cfg.output_dir)) / RESULTS_FILE}")
    return 0
