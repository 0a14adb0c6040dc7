"""``ifdistill-eval``: the Hydra entry point around :func:`ifdistill.evaluator.run.evaluate`.

The config comes from the installed ``ifdistill.conf`` package (``conf/eval.yaml`` and the ``eval``
group), so the command works from any directory. Before Hydra or torch start, the process removes a
trainer's distributed variables from its own environment (:func:`~ifdistill.evaluator.launch.clean_environment`):
started from inside a training job by any means, it still never joins that job.

Input errors (missing model, adapter mismatch, no chat template, empty data, prompt too long, bad
config) print one line and exit with status 2; anything else is a bug and keeps its traceback.
Also runnable as ``python -m ifdistill.evaluator.cli`` (what the checkpoint callback starts).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional, Sequence

import hydra
from omegaconf import DictConfig

from ifdistill.evaluator.launch import clean_environment

log = logging.getLogger("ifdistill.evaluator")


def _summary(results: dict) -> str:
    """The hash, then the benchmark's own lines (:meth:`~ifdistill.evaluator.benchmark.Benchmark.summary`)."""
    from ifdistill.evaluator.benchmark import of_results

    return "\n".join([f"eval_config_hash {results['eval_config_hash']}", *of_results(results).summary(results)])


@hydra.main(config_path="pkg://ifdistill.conf", config_name="eval", version_base="1.3")
def _app(cfg: DictConfig) -> None:
    from ifdistill.evaluator.errors import input_errors
    from ifdistill.evaluator.output import RESULTS_FILE
    from ifdistill.evaluator.run import evaluate

    try:
        results = evaluate(cfg)
    except input_errors() as err:
        log.error("%s: %s", type(err).__name__, err)
        print(f"ifdistill-eval: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(_summary(results))
    print(f"  results: {os.path.join(str(cfg.output_dir), RESULTS_FILE)}")


def compose_config(overrides: Sequence[str] = (), *, output_dir: Optional[str] = None) -> DictConfig:
    """The ``ifdistill-eval`` config with command-line style ``overrides``, without running Hydra's app
    (tests, benchmarks, notebooks). ``${hydra:...}`` is unavailable here, so ``output_dir`` (or an
    ``output_dir=...`` override) names the result directory."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    extra = [f"paths.output_dir={output_dir}"] if output_dir is not None else []
    with initialize_config_module("ifdistill.conf", version_base="1.3"):
        return compose("eval", overrides=[*extra, *overrides])


def main() -> None:
    clean_environment(os.environ)
    _app()


if __name__ == "__main__":
    main()
