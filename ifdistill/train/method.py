"""What a training method is to the rest of ifdistill: a LightningModule class plus the hooks here.

A method is its ``conf/method/<name>.yaml`` (``_target_`` = the module class, the rest its settings)
and the code that class brings. Training (:mod:`ifdistill.train.run`), preflight and the data layer
name no method: they find the class from ``_target_`` (:func:`method_class`; before a model is needed,
only its light ``hooks`` module: :func:`method_hooks`) and ask it, through the class-level hooks of
:class:`MethodHooks`, what only the method knows:

- :attr:`~MethodHooks.settings_class`: the dataclass the ``method`` section becomes, the home of the
  method's defaults and value ranges (:mod:`ifdistill.methods.sft.settings`);
- :meth:`~MethodHooks.data_keys`: keys of the ``method`` section read by the data layer, not by the
  settings class (ICL distillation's ``k`` and ``demos``);
- :meth:`~MethodHooks.teacher_views`: the teacher views the data layer attaches to each example
  (``None``: plain SFT items; a mapping: the arguments of :class:`ifdistill.data.icl.IclSettings`);
- :meth:`~MethodHooks.prepare_items` and :meth:`~MethodHooks.train_collator`: what the datamodule
  (:class:`ifdistill.train.datamodule.TrainDataModule`) does to the built training items before
  batching them, and the collator of its training micro-batches -- the method's batch construction,
  which the datamodule runs without knowing it (off-policy distillation's k=0 teacher view and its
  shared-demonstration batches);
- :meth:`~MethodHooks.config_problems`: checks of the ``method`` section in the context of the whole
  config that show without a model (run by :func:`ifdistill.train.preflight.preflight`);
- :meth:`~MethodHooks.sections`: top-level config sections the method reads besides ``method``
  (off-policy distillation's ``teacher_pass``), which preflight then accepts;
- :meth:`~MethodHooks.works_alone` and :meth:`~MethodHooks.run_alone`: whether the config asks for
  work the method does instead of training (the teacher pass alone, ``+teacher_pass.only=true``: no
  run directory), and that work.

:class:`~ifdistill.methods.sft.module.SFTModule` implements the defaults (SFT); a method subclasses it
and overrides only what differs -- the model of TRL's trainers, where GKD is SFT with its own loss and
generation. Its constructor takes two objects: :class:`TrainingInputs`, what training supplies from outside
the ``method`` section (model, peft, optim, seed, the held-out names, dtype, gradient checkpointing, logit
chunking, validation at start, kernels), and the section itself as the method's settings class
(:attr:`MethodHooks.settings_class`, extending :class:`~ifdistill.methods.sft.settings.SFTSettings` as
TRL's ``GKDConfig`` extends ``SFTConfig``; :func:`method_settings`).

A method's own input or file that cannot be used (a damaged teacher cache, a full disk under it) raises
a :class:`MethodError` subclass: the training CLI reports it as one line, exit 2, as it does a bad config.

Loss normalisation is the base class's too: every method's step objective is a sum over counted
tokens divided by the tokens counted in the whole optimizer step (all micro-batches and ranks). A
method whose tokens are known only after it samples sets :attr:`MethodHooks.normalise_after_backward`;
the base class then divides the accumulated gradients by the step's token count just before the
optimizer steps (:meth:`SFTModule.on_before_optimizer_step`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ifdistill.data.build import DataConfig, TrainData
    from ifdistill.train.schemas import TrainConfig

FROM = "supplied_from"  # TrainingInputs field metadata: where training takes the value


@dataclass(frozen=True)
class TrainingInputs:
    """What training gives every method's constructor from outside its ``method`` section
    (:func:`ifdistill.train.run.build_module`); the method's own settings come as its settings object.
    Each field's metadata says where training takes the value from."""

    model: Mapping[str, Any] = field(metadata={FROM: "the model section"})
    peft: Optional[Mapping[str, Any]] = field(default=None, metadata={FROM: "the peft section"})
    optim: Optional[Mapping[str, Any]] = field(default=None, metadata={FROM: "the optim section"})
    seed: int = field(default=42, metadata={FROM: "seed"})
    val_names: Sequence[str] = field(default=("heldout",), metadata={FROM: "the data's held-out sets"})
    # None: the model section's; training forces float32 on CPU
    dtype: Optional[str] = field(default=None,
                                 metadata={FROM: "the accelerator (float32 on CPU, the model's on a GPU)"})
    gradient_checkpointing: bool = field(default=False, metadata={FROM: "gradient_checkpointing"})
    # None: the model section's (ifdistill.train.packed_attention); tests and benchmarks pick one
    attn_implementation: Optional[str] = field(default=None, metadata={FROM: "model.attn_implementation"})
    # apply the LM head, the objective and the held-out sums to this many supervised positions at a time
    # (ifdistill.train.chunked_head); None: all at once
    logit_chunk_size: Optional[int] = field(default=None, metadata={FROM: "logit_chunk_size"})
    validate_at_start: bool = field(default=False, metadata={FROM: "run.validate_at_start"})
    # also log the held-out KL to the base model (ifdistill.train.drift)
    drift_from_base: bool = field(default=False, metadata={FROM: "run.drift_from_base"})
    # how the step is executed: compiled decoder layers and loss, Liger's kernels (ifdistill.train.compile);
    # None: the schema's defaults (auto: on CUDA)
    kernels: Optional[Mapping[str, Any]] = field(default=None, metadata={FROM: "the kernels section"})


#: Each :class:`TrainingInputs` field with where its value comes from. Preflight refuses a ``method`` section
#: that sets one (``+method.seed=7``): training's value would replace it unseen while the run's config, and
#: so its hash, recorded the section's.
SUPPLIED_BY_TRAINING: dict[str, str] = {f.name: f.metadata[FROM] for f in fields(TrainingInputs)}


class MethodError(RuntimeError):
    """A method's own input or file that cannot be used; the message is one line naming it."""


class MethodHooks:
    """Class-level hooks a method overrides (module docstring); the defaults are SFT's."""

    normalise_after_backward: bool = False
    #: the dataclass of the method's ``method`` section (:mod:`ifdistill.methods.sft.settings`), which the
    #: module's constructor takes beside :class:`TrainingInputs`
    settings_class: type

    @classmethod
    def data_keys(cls) -> tuple[str, ...]:
        return ()

    @classmethod
    def teacher_views(cls, method: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
        return None

    @classmethod
    def prepare_items(cls, data: DataConfig, built: TrainData) -> None:
        """Complete the training items of ``built`` (made from the resolved ``data`` config) in place,
        once, before any batch reads them."""

    @classmethod
    def train_collator(cls, default: Callable, *, data: DataConfig, tokenizer: Any, built: TrainData) -> Callable:
        """The collator of training micro-batches; ``default`` is the data layer's for ``data``
        (:func:`ifdistill.data.build.collator_for`). Validation batches always use the data layer's."""
        return default

    @classmethod
    def config_problems(cls, method: Mapping[str, Any], tree: Mapping[str, Any]) -> list[str]:
        """Problems of the ``method`` section read with the whole config ``tree`` (plain, resolved), each
        one line naming its key."""
        return []

    @classmethod
    def sections(cls) -> tuple[str, ...]:
        return ()

    @classmethod
    def works_alone(cls, config: TrainConfig) -> bool:
        return False

    @classmethod
    def run_alone(cls, config: TrainConfig, build: Callable[[], tuple[Any, Any, bool]]) -> dict[str, Any]:
        """Called when :meth:`works_alone`; ``build()`` returns ``(datamodule set up for fit, module, on_gpu)``."""
        raise NotImplementedError(f"{cls.__name__} has no work to do instead of training")


def method_class(method: Optional[Mapping[str, Any]]) -> type:
    """The class named by a ``method`` section's ``_target_`` (a :class:`MethodHooks` subclass)."""
    from hydra.utils import get_class

    target = (method or {}).get("_target_")
    if not target:
        raise ValueError("method: no _target_ (the module class of the method)")
    cls = get_class(str(target))
    if not issubclass(cls, MethodHooks):
        raise ValueError(f"method._target_={target} is not a training method (a subclass of SFTModule)")
    return cls


def method_hooks(method: Optional[Mapping[str, Any]]) -> type:
    """The hooks of the method ``method._target_`` names, without importing its module: ``HOOKS`` of the
    ``hooks`` module beside it (``ifdistill.methods.distill.hooks`` for
    ``ifdistill.methods.distill.module.ICLDistillModule``), which imports neither torch nor Lightning, so
    preflight and the data layer ask a method what it reads in Python's start-up time. A method without
    such a module answers through its class (:func:`method_class`)."""
    import importlib

    target = str((method or {}).get("_target_") or "")
    package = target.rsplit(".", 2)[0] if target.count(".") >= 2 else ""
    try:
        hooks = importlib.import_module(f"{package}.hooks") if package else None
    except ModuleNotFoundError as err:
        if err.name != f"{package}.hooks":
            raise
        hooks = None
    found = getattr(hooks, "HOOKS", None)
    return found if isinstance(found, type) and issubclass(found, MethodHooks) else method_class(method)


def teacher_views_of(method: Optional[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """What the data layer attaches for ``method`` (:meth:`MethodHooks.teacher_views`); ``None`` for no section."""
    if method is None:
        return None
    return method_hooks(method).teacher_views(method)


#: Keys of a node that Hydra reads, not the object it builds.
HYDRA_KEYS = frozenset({"_target_", "_recursive_", "_convert_", "_partial_", "_args_"})


def method_settings(method: Mapping[str, Any]) -> Any:
    """The ``method`` section as its method's settings object (:attr:`MethodHooks.settings_class`), without
    Hydra's keys and the keys the data layer reads (:meth:`MethodHooks.data_keys`)."""
    hooks = method_hooks(method)
    skipped = HYDRA_KEYS | set(hooks.data_keys())
    return hooks.settings_class(**{str(k): v for k, v in dict(method).items() if k not in skipped})
