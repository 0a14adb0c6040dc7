"""``ifdistill-train``'s configuration as typed objects: the schemas of its plain-data sections and
:class:`TrainConfig`, what :func:`ifdistill.train.run.train` and everything below it read.

Sections that build objects (``method``, ``trainer``, ``logger``, each callback) carry a ``_target_``
and are checked against their target's signature by preflight; these sections are plain data, so a
typo'd key or a wrong type fails here, naming the key, not at step 500. Each schema holds its values'
ranges too (``ranges``), which preflight applies to the composed tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from ifdistill.config import ModelSchema, Range, check_schema, is_int, is_num, register_schema


@dataclass
class RunSchema:
    name: str = "train"  # run id = <name>-<config_hash[:12]> (train.yaml: ${task_name})
    group: Optional[str] = None  # runs that belong together (a sweep): the W&B group
    dir: Optional[str] = None  # explicit run directory (default: derived from the config hash)
    resume: str = "auto"  # auto | never | required
    eval_every_n_steps: int = 50  # held-out teacher-forced metrics (val/<source>/{ce,acc,entropy})
    validate_at_start: bool = True  # also at step 0, so a curve has its starting point
    drift_from_base: bool = True  # held-out KL to the base model at each validation (ifdistill.train.drift)
    checkpoint_every_n_steps: int = 200
    keep_last_checkpoints: int = 3
    hash_ignore: Optional[list[str]] = None  # null: ifdistill.runs.rundir.HASH_IGNORE
    verbose: bool = False  # libraries' INFO output and warnings on the console too (always in logs/console.log)
    # a non-finite loss, gradient or weight (any rank): stop (exit 3, state diverged) or skip the step, at most
    # max_skipped_steps times (ifdistill.train.nonfinite)
    on_nonfinite: str = "stop"
    max_skipped_steps: int = 10
    resume_from: Optional[str] = None  # a run directory to start from when this run has no checkpoint

    ranges: ClassVar[tuple[Range, ...]] = (
        ("checkpoint_every_n_steps", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
        ("eval_every_n_steps", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
        ("keep_last_checkpoints", lambda v: is_int(v) and v >= 1, "an integer >= 1 (a run resumes from the last)"),
        ("resume", lambda v: v in ("auto", "never", "required"), "auto, never or required"),
        ("on_nonfinite", lambda v: v in ("stop", "skip"), "stop or skip"),
        ("max_skipped_steps", lambda v: is_int(v) and v >= 0, "an integer >= 0"),
    )


@dataclass
class OptimSchema:
    name: str = "adamw"  # adamw | sgd | deepspeed_cpu_adam
    lr: float = 2e-4
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    schedule: str = "cosine"  # constant | linear | cosine (to trainer.max_steps)
    warmup_steps: int = 0
    min_lr_ratio: float = 0.0
    foreach: Optional[bool] = None
    fused: Optional[bool] = None  # null: fused AdamW where every trainable parameter is on CUDA

    ranges: ClassVar[tuple[Range, ...]] = (
        ("lr", lambda v: is_num(v) and v > 0, "a number > 0"),
        ("weight_decay", lambda v: is_num(v) and v >= 0, "a number >= 0"),
        ("warmup_steps", lambda v: is_int(v) and v >= 0, "an integer >= 0"),
        ("min_lr_ratio", lambda v: is_num(v) and 0 <= v <= 1, "a number in [0, 1]"),
    )


@dataclass
class DataModuleSchema:
    micro_batch_size: int = 4  # examples per rank per micro-batch; global batch = this x devices x accumulate
    val_batch_size: int = 8
    # padding-free rows (position ids restart per example, boundaries passed to the attention kernel): true |
    # false | auto (SFT on a GPU; the same examples and losses as padded, ifdistill/train/datamodule.py)
    packing: Any = "auto"
    max_row_tokens: Optional[int] = None  # packed row capacity (null: one row per micro-batch)
    num_workers: Optional[int] = None  # null: 2 on a GPU, 0 on CPU

    ranges: ClassVar[tuple[Range, ...]] = (
        ("micro_batch_size", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
        ("val_batch_size", lambda v: is_int(v) and v >= 1, "an integer >= 1"),
        ("num_workers", lambda v: v is None or (is_int(v) and v >= 0), "null or an integer >= 0"),
        ("packing", lambda v: v in (True, False, "auto"), "true, false or auto"),
    )


@dataclass
class PeftSchema:
    method: str  # none | lora: each option of the peft group names its own (no default: none.yaml is a choice)
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: Optional[list[str]] = None
    bias: str = "none"
    use_rslora: bool = False
    quantize: Optional[str] = None  # null | 4bit | 8bit (QLoRA; needs bitsandbytes and a GPU)


@dataclass
class KernelsSchema:
    """How the same computation is executed (:mod:`ifdistill.train.compile`, docs/gpu.md); outside config_hash
    (:data:`ifdistill.runs.rundir.HASH_IGNORE`): the losses and gradients agree within float rounding."""

    # torch.compile of each decoder layer (one graph shared by all layers): true | false | auto (on CUDA)
    compile: Any = "auto"
    # torch.compile of the objective run on each chunk of the LM head: true | false | auto (with compile)
    compile_loss: Any = "auto"
    # sequence length (and batch) symbolic from the first compilation: every packed row length runs one graph
    # (false: a graph per length, up to Dynamo's recompile_limit of 8, eager after that)
    dynamic: bool = True
    compile_mode: Optional[str] = None  # torch.compile's mode (null: its default; max-autotune-no-cudagraphs, ...)
    # torch.compile's backend: inductor (generated kernels) | aot_eager (the traced graph run by eager ops: to
    # tell a compiler problem from a tracing one)
    compile_backend: str = "inductor"
    # Liger Kernel's Triton RMSNorm, RoPE and SwiGLU, patched before the model is built: true | false | auto
    # (where liger-kernel imports and CUDA is visible)
    liger: Any = "auto"


SCHEMAS: dict[str, Any] = {"run": RunSchema, "optim": OptimSchema, "datamodule": DataModuleSchema, "peft": PeftSchema,
                           "kernels": KernelsSchema}
for _name, _schema in SCHEMAS.items():
    register_schema(_name, _schema)


@dataclass
class TrainConfig:
    """One training job's configuration, typed and checked (built at the command's edge by
    :func:`ifdistill.train.config_edge.train_config`, after preflight).

    The plain-data sections are their schemas' objects; the sections that build objects (``method``,
    ``trainer``, ``logger``, ``callbacks``) and ``data`` (typed by the data layer,
    :class:`ifdistill.data.build.DataConfig`) are plain resolved mappings, as their constructors take them.
    ``tree`` is the whole configuration as plain data: what the run directory's hash is computed from and
    what ``config.yaml`` and the loggers record (:func:`ifdistill.runs.rundir.resolved_tree`).
    """

    tree: dict[str, Any]
    run: RunSchema
    model: ModelSchema
    optim: OptimSchema
    datamodule: DataModuleSchema
    peft: PeftSchema
    kernels: KernelsSchema = field(default_factory=KernelsSchema)
    task_name: str = "train"
    seed: int = 42
    gradient_checkpointing: bool = False
    logit_chunk_size: Optional[int] = None
    method: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    trainer: dict[str, Any] = field(default_factory=dict)
    callbacks: dict[str, Any] = field(default_factory=dict)
    logger: Optional[dict[str, Any]] = None
    paths: dict[str, Any] = field(default_factory=dict)  # where things are read and written (PathsSchema, checked)

    @classmethod
    def from_tree(cls, tree: Mapping[str, Any]) -> TrainConfig:
        """The typed config of a plain resolved tree; a section that does not fit its schema raises
        :class:`~ifdistill.config.ConfigError` naming the key (preflight has reported it already)."""
        typed = {name: check_schema(schema, tree.get(name) or {}, f"config section '{name}'", as_object=True)
                 for name, schema in (("run", RunSchema), ("model", ModelSchema), ("optim", OptimSchema),
                                      ("datamodule", DataModuleSchema), ("peft", PeftSchema),
                                      ("kernels", KernelsSchema))}
        plain = {name: tree[name] for name in ("task_name", "seed", "gradient_checkpointing", "logit_chunk_size",
                                               "method", "data", "trainer", "logger", "paths") if name in tree}
        return cls(tree=dict(tree), **typed, **plain, callbacks=dict(tree.get("callbacks") or {}))

    def section(self, name: str) -> Any:
        """A top-level section as plain data (``model`` as written, or a section a method reads, such as
        off-policy distillation's ``teacher_pass``); ``None`` when the config has none."""
        return self.tree.get(name)
