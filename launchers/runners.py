"""Where a checkpoint evaluation runs: one small interface, chosen by name or by a config node.

``callbacks/`` decides *when* an evaluation runs (the checkpoint-eval callback, back-fill); this package
decides *where*: :class:`~ifdistill.launchers.local_eval.LocalRunner` (a process group on this node,
the default), :class:`~ifdistill.launchers.persistent_eval.PersistentRunner` (one long-lived
``ifdistill-eval serve`` on this node for all of a run's checkpoints) or
:class:`~ifdistill.launchers.slurm_eval.SlurmRunner` (one SLURM job per evaluation).
Every runner receives the same job -- the evaluator's argv and environment, built once by
:func:`ifdistill.evaluator.launch.evaluator_command` -- so only the place differs, never the program.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

RUNNERS = ("local", "slurm", "persistent")
ENGINES = ("process", "persistent")


class Runner(Protocol):
    """Starts, polls and kills one evaluation; ``poll`` returns None while running, else an exit code
    (negative: killed by that signal). A runner that keeps something between jobs (a long-lived
    evaluator) also has ``close()``, called when its queue is done."""

    def start(self, job: Any) -> Any: ...
    def poll(self, job: Any) -> int | None: ...
    def kill(self, job: Any) -> None: ...


def make_runner(spec: Any = None, **options: Any) -> Runner:
    """A runner from ``spec``: None or ``"local"``; ``"slurm"`` or ``"persistent"`` (``options`` are the
    runner's fields); a config node with ``_target_``
    (``callbacks.checkpoint_eval.runner``); or a runner object, returned as it is."""
    if hasattr(spec, "start"):
        return spec
    if spec is None or spec == "local":
        from ifdistill.launchers.local_eval import LocalRunner

        return LocalRunner()
    if spec == "slurm":
        from ifdistill.launchers.slurm_eval import SlurmRunner

        return SlurmRunner(**options)
    if spec == "persistent":
        from ifdistill.launchers.persistent_eval import PersistentRunner

        return PersistentRunner(**options)
    if isinstance(spec, Mapping) or hasattr(spec, "keys"):
        from hydra.utils import instantiate

        if "_target_" not in spec:
            raise ValueError(f"an evaluation runner node needs a _target_: {dict(spec)}")
        return instantiate(spec, **options)
    raise ValueError(f"unknown evaluation runner {spec!r}: use one of {', '.join(RUNNERS)} or a node with _target_")


def engine_problem(engine: str, runner: Any) -> str | None:
    """Why ``engine`` and ``runner`` of a ``callbacks.checkpoint_eval`` section do not go together (``None``:
    they do); preflight reports it through the section's settings, :func:`checkpoint_eval_runner` raises it."""
    if engine not in ENGINES:
        return f"engine must be process or persistent, not {engine!r}"
    if engine == "persistent" and runner is not None:
        return ("engine=persistent runs the evaluator on this node; it does not combine with a runner "
                "(a SLURM job per evaluation is engine=process)")
    return None


def checkpoint_eval_runner(runner: Any = None, engine: str = "process", persistent: Mapping[str, Any] | None = None,
                           **options: Any) -> Runner:
    """The runner a run's ``callbacks.checkpoint_eval`` section names (its ``runner``, ``engine`` and
    ``persistent`` fields): ``engine=persistent`` is one long-lived evaluator on this node (``persistent``
    and ``options`` are its settings) and takes no ``runner``; ``engine=process`` is a process per
    evaluation wherever ``runner`` says. The callback and back-fill both read the section through here."""
    problem = engine_problem(engine, runner)
    if problem:
        raise ValueError(problem)
    if engine == "persistent":
        return make_runner("persistent", **{**dict(persistent or {}), **options})
    return make_runner(runner, **options)
