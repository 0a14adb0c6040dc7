"""Fewer launches per training step: regional compilation of the decoder layers and of the loss, and Liger's
fused kernels (the ``kernels`` section, :class:`~ifdistill.train.schemas.KernelsSchema`; docs/gpu.md).

Why: a small model's step on a GPU is bound by the host. Eager PyTorch dispatches every operator of every
decoder layer one by one -- an RMSNorm is several, RoPE about ten, each LoRA adapter four -- and at Qwen3-1.7B's
shape the host spends most of a 4k-token step issuing them while the device waits. ``torch.compile`` traces
a layer once and runs it as a few generated kernels (Inductor fuses the element-wise chains into the
matmuls' neighbours), so the host issues a handful of launches per layer instead of ~150.

Regional: each decoder layer's ``forward`` is compiled, not the whole model. All layers of a model are
instances of one class whose parameters Dynamo treats as inputs, so the 28 layers of Qwen3-1.7B share *one*
graph: compile time is one layer's, whatever the depth. Everything outside the layers (the embedding, the
mask construction, the chunked LM head, the strategy's hooks) stays eager, and the strategy's module hooks
run around the compiled call, not inside it. PEFT's LoRA layers are submodules of the decoder layer, so the
adapters are inside the compiled region.

Shapes: packed rows vary in length every step. With ``dynamic`` (the default) the first compilation already
treats every activation dimension as symbolic, so all row lengths run the same graph; Dynamo specialises
only on sizes 0 and 1 (a packed batch has one row, a padded one several). What Dynamo guards besides the
shapes gives the bound on compilations per model, stated once here and checked by
``tests/unit/train/test_compiled_step.py``: one graph per combination of grad mode (training, or a teacher /
validation under ``no_grad``), batch of one row or several, adapter enabled or disabled (a LoRA run's
frozen-initial teacher), and whether the layer's input needs a gradient (a LoRA student's first layer reads the
frozen embedding) -- at most 8, Dynamo's default ``recompile_limit``. SFT on packed rows of any lengths
compiles one graph (full fine-tuning) or two (LoRA).
A call with a key/value cache (a shared-demonstration teacher's prefix) runs the layer eagerly: the cache's
per-layer state would otherwise make every layer a graph of its own.

``auto`` compiles on CUDA only: on CPU a compilation costs tens of seconds of a short run, and the proxy of
``bench/bench_host_overhead.py`` measures what it saves there. Under DeepSpeed ZeRO-3, which gathers each
layer's parameters in hooks and frees them after the call, compiled layers are refused when asked for and
left out under ``auto`` (:func:`check_strategy`).

Liger Kernel (``liger-kernel``, Triton, optional): its RMSNorm, RoPE and SwiGLU replace the model's classes
before the model is built (:func:`apply_liger`), on CUDA only and only where the package imports.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, Optional

import torch
from torch import nn

from ifdistill.config import ConfigError

log = logging.getLogger(__name__)

AUTO = "auto"
_TRUE, _FALSE = ("true", "on", "1", "yes"), ("false", "off", "0", "no")


def choice(value: Any, key: str) -> bool | str:
    """``True``, ``False`` or ``"auto"`` from a setting (a bool, or one of those words); a ValueError names ``key``."""
    if isinstance(value, bool) or value == AUTO:
        return value
    word = str(value).strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError(f"kernels.{key} must be true, false or auto, got {value!r}")


def settings(kernels: Optional[Mapping[str, Any]]):
    """The ``kernels`` mapping as its schema (a key the mapping lacks: the schema's default), values checked."""
    from ifdistill.train.schemas import KernelsSchema

    s = KernelsSchema(**dict(kernels or {}))
    for key in ("compile", "compile_loss", "liger"):
        choice(getattr(s, key), key)
    return s


class CompiledForward:
    """A decoder layer's ``forward`` as an instance attribute: compiled, or the class's own where the compiled
    graph does not apply (module docstring). A deep copy of the layer (a frozen teacher, the drift's base)
    gets a compiled forward of its own copy."""

    def __init__(self, layer: nn.Module, *, cuda_only: bool, options: Mapping[str, Any]):
        self.layer, self.cuda_only, self.options = layer, cuda_only, dict(options)
        self.eager = type(layer).forward.__get__(layer)
        self.compiled = torch.compile(self.eager, **self.options)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hidden = args[0] if args else kwargs.get("hidden_states")
        if kwargs.get("past_key_values") is not None or (self.cuda_only and not hidden.is_cuda):
            return self.eager(*args, **kwargs)
        return self.compiled(*args, **kwargs)

    def __deepcopy__(self, memo: dict) -> "CompiledForward":
        layer = memo.get(id(self.layer))
        if layer is None:  # the layer itself is not being copied: the copy shares this forward
            return self
        return CompiledForward(layer, cuda_only=self.cuda_only, options=self.options)


def compile_options(dynamic: bool = True, mode: Optional[str] = None, backend: str = "inductor") -> dict[str, Any]:
    """``torch.compile``'s keyword arguments for the ``kernels`` settings of the same names."""
    return {"dynamic": dynamic, "mode": mode, "backend": backend}


def compile_layers(layers: list[nn.Module], when: bool | str, options: Mapping[str, Any]) -> int:
    """Give each layer a :class:`CompiledForward` (``when``: ``True``, or ``"auto"`` for CUDA inputs only;
    ``options``: :func:`compile_options`); returns how many layers were compiled. Compilation happens at the
    first call."""
    if when is False or (when == AUTO and not torch.cuda.is_available()):  # no CUDA in this process: eager
        return 0
    for layer in layers:
        layer.forward = CompiledForward(layer, cuda_only=when == AUTO, options=options)
    return len(layers)


def compiled_layers(layers: list[nn.Module]) -> list[nn.Module]:
    return [layer for layer in layers if isinstance(layer.__dict__.get("forward"), CompiledForward)]


def uncompile_layers(layers: list[nn.Module]) -> int:
    """Back to the class's own ``forward``; returns how many layers had a compiled one."""
    done = compiled_layers(layers)
    for layer in done:
        del layer.forward
    return len(done)


def compiled_objective(fn: Callable, when: bool | str, device: torch.device, options: Mapping[str, Any]) -> Callable:
    """``fn`` (a per-chunk objective: logits, targets, teacher -> loss, sums) compiled where ``when`` says;
    the chunk's row count is symbolic (the last chunk is shorter)."""
    if when is False or (when == AUTO and device.type != "cuda"):
        return fn
    return torch.compile(fn, **options)


def zero_stage(strategy: Any) -> Optional[int]:
    """The ZeRO stage of a Lightning DeepSpeed strategy (``None`` for any other strategy)."""
    config = getattr(strategy, "config", None)
    if not isinstance(config, Mapping) or "zero_optimization" not in config:
        return None
    return int(config["zero_optimization"].get("stage", 0))


def check_strategy(strategy: Any, world_size: int, when: bool | str, layers: list[nn.Module]) -> None:
    """What compiled layers and the strategy make together: refused (a one-line :class:`ConfigError`) or left
    out (``auto``) under ZeRO-3; a warning for DeepSpeed on one device, which shards nothing there."""
    stage = zero_stage(strategy)
    if stage == 3 and compiled_layers(layers):
        if when is True:
            raise ConfigError("kernels.compile=true: DeepSpeed ZeRO-3 gathers each layer's parameters in hooks around "
                              "its call and frees them after, which a compiled layer cannot follow; use "
                              "kernels.compile=false, or trainer=fsdp")
        uncompile_layers(layers)
        log.info("kernels.compile=auto: the decoder layers run eagerly under DeepSpeed ZeRO-3")
    if stage is not None and world_size == 1:
        log.warning("DeepSpeed ZeRO-%d on one device shards nothing and adds hooks on every parameter: on one GPU "
                    "train with trainer=gpu (one device, bf16-mixed, fused AdamW; docs/gpu.md)", stage)


@functools.lru_cache(maxsize=None)
def apply_liger(model_type: str) -> bool:
    """Liger's RMSNorm, RoPE and SwiGLU for ``model_type`` (patched into transformers' modeling module, so
    before the model is built); ``False`` where the package or a patch for that model type is missing. The
    fused linear cross-entropy stays off: the chunked head (:mod:`ifdistill.train.chunked_head`) computes the
    distillation objectives too, which Liger's computes only cross-entropy for."""
    try:
        from liger_kernel.transformers import _apply_liger_kernel
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError:
        return False
    if model_type not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        log.info("kernels.liger: liger-kernel has no patch for model type %s", model_type)
        return False
    _apply_liger_kernel(model_type, rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                        fused_linear_cross_entropy=False)
    return True


def liger_installed() -> bool:
    try:
        import liger_kernel  # noqa: F401
    except ImportError:
        return False
    return True


def liger_in(model: nn.Module) -> bool:
    """Whether ``model``'s normalisation layers are Liger's (its patch applied before the model was built)."""
    return any(type(m).__module__.startswith("liger_kernel") for m in model.modules())


def want_liger(when: bool | str) -> bool:
    """Whether ``kernels.liger`` asks for Liger here; ``True`` without CUDA or the package is an error."""
    if when is False:
        return False
    cuda, installed = torch.cuda.is_available(), liger_installed()
    if when is True and not (cuda and installed):
        raise ConfigError("kernels.liger=true needs a CUDA GPU and liger-kernel (pip install 'ifdistill[gpu]'); "
                          f"here: CUDA {'visible' if cuda else 'not visible'}, liger-kernel "
                          f"{'installed' if installed else 'not installed'}")
    return cuda and installed
