"""Schemas of the plain-data config sections that ``ifdistill-train`` owns (checked at start-up).

Sections that build objects (``method``, ``trainer``, ``logger``) carry a ``_target_`` and are checked
by instantiating them before training starts; these sections are plain data, so a typo'd key or a
wrong type must fail here, naming the key, not at step 500.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ifdistill.config import register_schema


@dataclass
class RunSchema:
    name: str = "train"
    group: Optional[str] = None  # runs that belong together (a sweep): the W&B group
    dir: Optional[str] = None  # explicit run directory (default: derived from the config hash)
    resume: str = "auto"  # auto | never | required
    eval_every_n_steps: int = 50
    validate_at_start: bool = True
    drift_from_base: bool = True  # held-out KL to the base model at each validation (ifdistill.train.drift)
    checkpoint_every_n_steps: int = 200
    keep_last_checkpoints: int = 3
    hash_ignore: Optional[list[str]] = None  # null: ifdistill.runs.rundir.HASH_IGNORE
    verbose: bool = False  # libraries' INFO output and warnings on the console too (always in logs/console.log)
    on_nonfinite: str = "stop"  # stop | skip (ifdistill.train.divergence)
    max_skipped_steps: int = 10
    resume_from: Optional[str] = None  # a run directory to start from when this run has no checkpoint


@dataclass
class OptimSchema:
    name: str = "adamw"  # adamw | sgd | deepspeed_cpu_adam
    lr: float = 2e-4
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    schedule: str = "cosine"  # constant | linear | cosine
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0
    foreach: Optional[bool] = None
    fused: Optional[bool] = None  # null: fused AdamW where every trainable parameter is on CUDA


@dataclass
class DataModuleSchema:
    micro_batch_size: int = 4
    val_batch_size: int = 8
    packing: Any = "auto"  # true | false | auto (SFT on a GPU)
    max_row_tokens: Optional[int] = None
    num_workers: Optional[int] = None  # null: 2 on a GPU, 0 on CPU


@dataclass
class PeftSchema:
    method: str = "none"  # none | lora
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: Optional[list[str]] = None
    bias: str = "none"
    use_rslora: bool = False
    quantize: Optional[str] = None  # null | 4bit | 8bit (QLoRA; needs bitsandbytes and a GPU)


SCHEMAS: dict[str, Any] = {"run": RunSchema, "optim": OptimSchema, "datamodule": DataModuleSchema, "peft": PeftSchema}
for _name, _schema in SCHEMAS.items():
    register_schema(_name, _schema)
