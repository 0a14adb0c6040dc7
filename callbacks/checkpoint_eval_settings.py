"""The checkpoint-eval callback's settings: the one home of their defaults.

:class:`~ifdistill.callbacks.checkpoint_eval.CheckpointEvalCallback` takes these as keyword arguments whose
defaults read this dataclass, and Hydra composes ``callbacks.checkpoint_eval`` from it (``schema/checkpoint_eval``,
which ``conf/callbacks/checkpoint_eval.yaml`` extends): the composed section holds every key at its default, any
key can be overridden without ``+``, and the YAML states only the wiring (``eval_cfg: ${eval}``, ...). This
module imports nothing heavy, so composing a config does not import Lightning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ifdistill.callbacks.eval_jobs import EVAL_TIMEOUT_S, POLICIES
from ifdistill.config import store_target_schema


@dataclass
class CheckpointEvalSettings:
    every_n_steps: Optional[int] = 200  # each checkpoint is exported and evaluated; null: at the end only
    at_end: bool = True
    at_start: bool = False  # also export and evaluate step 0 (the base model's row) before training
    export_merged: bool = False  # also write exports/step_X/merged (LoRA merged into the base weights)
    evaluate_kind: str = "auto"  # which part of an export is evaluated: auto | adapter | merged | model
    chat_template: Optional[str] = None  # a template file the exports carry instead of the tokenizer's
    max_running: int = 1  # evaluations at once
    max_pending: int = 4  # waiting evaluations before `policy` applies
    policy: str = "wait"  # wait (block training, lose nothing) | skip_new | drop_oldest (both recorded)
    timeout_s: float = EVAL_TIMEOUT_S  # an evaluation running longer is killed and counts as failed
    retries: int = 1
    final_wait_s: float = 3600.0  # at the end of training, wait this long for outstanding evaluations
    # overrides of eval.runtime for the evaluator process, e.g. {cuda_visible_devices: "1"}, or on CPU
    # {cpu_threads_bind: "1"} next to a trainer pinned to core 0
    devices: dict[str, Any] = field(default_factory=dict)
    log_samples: int = 64  # rows of the W&B samples table
    # process: a fresh ifdistill-eval per checkpoint | persistent: one `ifdistill-eval serve` for the run (no
    # engine start per checkpoint; the same results: launchers/persistent_eval.py)
    engine: str = "process"
    persistent: dict[str, Any] = field(default_factory=dict)  # PersistentRunner settings ({request_timeout_s: 1800})
    evals: dict[str, Any] = field(default_factory=dict)  # more benchmarks per export, {name: eval section}
    # null: a local process; or a SLURM job per evaluation, {_target_: ifdistill.launchers.slurm_eval.SlurmRunner,
    # ...} (callbacks=checkpoint_eval_slurm)
    runner: Any = None

    def __post_init__(self) -> None:
        """Range and choice checks, each message starting with its key (preflight prefixes the section)."""
        from ifdistill.evaluator.settings import EXPORT_KINDS
        from ifdistill.launchers.runners import engine_problem

        if self.every_n_steps is not None and self.every_n_steps <= 0:
            raise ValueError(f"every_n_steps: must be positive (or null to evaluate only at the end), "
                             f"got {self.every_n_steps}")
        for key, value, allowed in (("evaluate_kind", self.evaluate_kind, EXPORT_KINDS), ("policy", self.policy, POLICIES)):
            if value not in allowed:
                raise ValueError(f"{key}: must be one of {', '.join(allowed)}, got {value!r}")
        for key, low in (("max_running", 1), ("max_pending", 0), ("retries", 0), ("log_samples", 0)):
            if getattr(self, key) < low:
                raise ValueError(f"{key}: must be at least {low}, got {getattr(self, key)}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s: must be positive seconds, got {self.timeout_s}")
        if not self.final_wait_s >= 0:  # 0: list what is outstanding at the end without waiting
            raise ValueError(f"final_wait_s: must be at least 0 seconds, got {self.final_wait_s}")
        problem = engine_problem(self.engine, self.runner)  # the runner's own check, run at the edge
        if problem:
            raise ValueError(problem)

#: The settings' defaults, read by the callback's signature.
DEFAULTS = CheckpointEvalSettings()

store_target_schema("checkpoint_eval", CheckpointEvalSettings,
                    targets=("ifdistill.callbacks.checkpoint_eval.CheckpointEvalCallback",))
