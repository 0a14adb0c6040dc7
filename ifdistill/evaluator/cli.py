"""``ifdistill-eval``: the Hydra entry point around :func:`ifdistill.evaluator.run.evaluate`.

The config comes from the installed ``ifdistill.conf`` package (``conf/eval.yaml`` and the ``eval``
group), so the command works from any directory. Before Hydra or torch start, the process removes a
trainer's distributed variables from its own environment (:func:`~ifdistill.evaluator.launch.clean_environment`):
started from inside a training job by any means, it still never joins that job.

Input errors (missing model, adapter mismatch, no chat template, empty data, prompt too long, bad
config) and writes refused for lack of space or permission print one line and exit with status 2;
anything else is a bug and keeps its traceback.
Also runnable as ``python -m ifdistill.evaluator.cli`` (what the checkpoint callback starts).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional, Sequence

import hydra
from omegaconf import DictConfig, OmegaConf

from ifdistill.command_line import compose, one_line, refuse_bad_overrides
from ifdistill.evaluator.launch import clean_environment
from ifdistill.evaluator.settings import TREE_SECTIONS, EvalConfig, eval_settings, run_settings
from ifdistill.startup_heap import pause_collector

log = logging.getLogger("ifdistill.evaluator")


def _summary(results: dict) -> str:
    """The hash, then the benchmark's own lines (:meth:`~ifdistill.benchmarks.base.Benchmark.summary`)."""
    from ifdistill.benchmarks.registry import of_results

    return "\n".join([f"eval_config_hash {results['eval_config_hash']}", *of_results(results).summary(results)])


def _quiet(cfg: DictConfig, log_dir: Optional[str] = None) -> None:
    """The console keeps ifdistill's lines (progress, the summary, errors); the engine's and every library's
    INFO lines and warnings go to ``console.log`` in ``log_dir`` (``verbose=true``: shown as well), as a
    training run's do (:func:`ifdistill.console.quiet_console`). By default ``log_dir`` is Hydra's run
    directory (beside ``eval.log``; the output directory unless ``hydra.run.dir`` says otherwise), so an
    evaluation refused for bad input writes nothing into its output directory."""
    from hydra.core.hydra_config import HydraConfig

    from ifdistill.console import quiet_console

    verbose = bool(cfg.get("verbose", False))
    if not verbose:  # vLLM's records then propagate to the root logger's handlers instead of its own
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    if log_dir is None:
        log_dir = HydraConfig.get().runtime.output_dir if HydraConfig.initialized() else str(cfg.output_dir)
    quiet_console(log_dir, verbose=verbose)


def _refuse_write(err: Exception, cfg: DictConfig) -> None:
    """A write refused for lack of space or permission (:mod:`ifdistill.write_failures`): one line naming
    the file and the free space, exit 2; any other error is raised again."""
    from ifdistill.write_failures import as_write_failure

    written = as_write_failure(err, near=cfg.get("output_dir"))
    if written is None:
        raise err
    print(f"ifdistill-eval: error: {written}", file=sys.stderr)
    sys.exit(2)


@hydra.main(config_path="pkg://ifdistill.conf", config_name="eval", version_base="1.3")
def _app(cfg: DictConfig) -> None:
    from ifdistill.evaluator.errors import input_errors
    from ifdistill.evaluator.output import RESULTS_FILE
    from ifdistill.evaluator.run import evaluate

    try:
        _quiet(cfg)
        results = evaluate(eval_config(cfg))
    except input_errors() as err:
        _refuse(err)
    except Exception as err:  # results, samples, logs: a write refused for lack of space or permission
        _refuse_write(err, cfg)
    print(_summary(results))
    print(f"  results: {os.path.join(str(cfg.output_dir), RESULTS_FILE)}")


def compose_config(overrides: Sequence[str] = (), *, output_dir: Optional[str] = None) -> DictConfig:
    """The ``ifdistill-eval`` config with command-line style ``overrides``, without running Hydra's app
    (tests, benchmarks, notebooks). ``${hydra:...}`` is unavailable here, so ``output_dir`` (or an
    ``output_dir=...`` override) names the result directory."""
    extra = [f"paths.output_dir={output_dir}"] if output_dir is not None else []
    return compose("eval", [*extra, *overrides])


def eval_config(cfg: DictConfig) -> EvalConfig:
    """The typed, validated configuration of an ``ifdistill-eval`` tree: the edge below which nothing reads
    the tree. Checked in the order its errors are reported: the ``eval`` section, the top-level keys, the
    ``model`` section."""
    from ifdistill.config import validate

    settings = eval_settings(cfg.eval)
    run = run_settings({k: OmegaConf.select(cfg, k, throw_on_resolution_failure=False)
                        for k in cfg.keys() if k not in TREE_SECTIONS})
    validate(cfg, ["model"])
    return EvalConfig(eval=settings, run=run, model=OmegaConf.to_container(cfg.model, resolve=True))


def load_config(overrides: Sequence[str] = (), *, output_dir: Optional[str] = None) -> EvalConfig:
    """:func:`compose_config`, typed (:func:`eval_config`): what tests, benchmarks and notebooks evaluate."""
    return eval_config(compose_config(overrides, output_dir=output_dir))


def _refuse(err: BaseException) -> None:
    print(f"ifdistill-eval: error: {one_line(err)}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    pause_collector()  # until the engine or model loads (ifdistill.startup_heap)
    clean_environment(os.environ)
    refuse_bad_overrides("ifdistill-eval", "eval", sys.argv[1:])
    _app()


if __name__ == "__main__":
    main()
