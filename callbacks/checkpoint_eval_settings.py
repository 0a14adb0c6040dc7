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

from ifdistill.callbacks.eval_jobs import EVAL_TIMEOUT_S
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


#: The settings' defaults, read by the callback's signature.
DEFAULTS = CheckpointEvalSettings()

store_target_schema("checkpoint_eval", CheckpointEvalSettings)
