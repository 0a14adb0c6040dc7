"""The one evaluator: ``ifdistill-eval`` by hand, the checkpoint callback in training, tests.

Modules: ``run`` (:func:`evaluate`, the code path everyone uses), ``cli`` (the Hydra entry point),
``rerun`` (``ifdistill-eval rerun <eval dir>``), ``launch`` (:func:`evaluator_command`: argv + environment
for a separate evaluator process), ``settings`` (the ``eval`` config schema), ``model_source`` (what is
evaluated), ``dataset`` and ``prompts`` (what the model reads), ``plan`` (what every benchmark's plan
holds; the plan over ``eval.data``'s rows), ``generation`` (requests and post-processing), ``backends``
(which backend) / ``backend_vllm`` / ``backend_hf`` (how it writes and scores), ``fingerprint``
(``eval_config_hash``), ``identity`` (a benchmark's own config sections in it), ``results`` / ``schema`` / ``output`` (what is written and read).

``benchmark``: the interface and registry of benchmarks; each folder of :mod:`ifdistill.benchmarks` with a
``benchmark`` module is one (``ifeval``, ``ifbench``, ``lmeval``, ``judge``), found by the registry, never
imported by this package.

Importing this package is cheap: torch, transformers and vLLM load only when an evaluation runs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["evaluate", "evaluator_command"]


def __getattr__(name: str) -> Any:
    if name == "evaluate":
        from ifdistill.evaluator.run import evaluate

        return evaluate
    if name == "evaluator_command":
        from ifdistill.evaluator.launch import evaluator_command

        return evaluator_command
    raise AttributeError(name)
