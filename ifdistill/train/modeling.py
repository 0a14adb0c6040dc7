"""Building the trainable model: load a causal LM, add LoRA (or QLoRA), and compute logits only where needed.

:class:`SelectiveLM` is the one forward pass every training path uses. It runs the decoder over the
whole sequence but applies the LM head only at the positions the caller selects (the supervised
tokens): for SFT on chat data the prompt is often half the tokens, and ``(B, L, V)`` logits are the
largest activation of a small-hidden/large-vocab model. It is also the *root* module that FSDP2 shards,
so that the embedding / final norm / LM head (a tied pair in small models) are gathered by one
``forward`` -- calling ``model.model`` and ``model.lm_head`` from outside a sharded root would leave
the root's parameters sharded.

LoRA teachers: PEFT's ``disable_adapter()`` gives the frozen initial model from the same weights, so a
LoRA run never holds a second copy (see :mod:`ifdistill.methods.distill.module`).

Precision under ``bf16-mixed`` (``torch.autocast``; ``model.dtype`` bfloat16 on GPU):

- LoRA: the frozen base weights are stored in ``model.dtype``; the adapters are the optimizer's float32
  master weights, and they compute in the autocast dtype from autocast's per-step cached copy. PEFT casts
  each adapted layer's *input* to the adapter's dtype (float32) and autocast casts it back to bfloat16 for
  the adapter's matmuls: two activation-sized copies per adapted layer and direction, values unchanged
  (bf16 -> fp32 -> bf16 is exact). :class:`SelectiveLM` turns that cast off while autocast is on.
- Full fine-tuning: every weight is trained, so every weight is loaded in float32 (the master weights;
  autocast computes in bfloat16). Training bfloat16 weights directly would round each update to 8
  significant bits: an update below 2^-9 of a weight is lost. ``bf16-true`` and DeepSpeed's ``bf16``
  cast the module themselves (DeepSpeed keeps its own float32 master copy).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, Optional

import torch
from torch import nn

from ifdistill.config import ModelSchema
from ifdistill.data.collate import PACKED_SDPA, packed_model_inputs
from ifdistill.models import resolve_model_path
from ifdistill.train.packed_attention import passes_boundaries, resolve_attn_implementation

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


class QLoRAUnavailable(RuntimeError):
    """QLoRA was requested where bitsandbytes or a CUDA GPU is missing."""


def torch_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[str(name)]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {sorted(DTYPES)}") from None


def _quantization_config(quantize: Optional[str]):
    if not quantize:
        return None
    if quantize not in ("4bit", "8bit"):
        raise ValueError(f"peft.quantize must be null, '4bit' or '8bit', got {quantize!r}")
    if not torch.cuda.is_available():
        raise QLoRAUnavailable(f"QLoRA ({quantize}) needs a CUDA GPU; none is visible. Use peft=lora on CPU.")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise QLoRAUnavailable(f"QLoRA ({quantize}) needs bitsandbytes: pip install bitsandbytes") from None
    from transformers import BitsAndBytesConfig

    if quantize == "4bit":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                  bnb_4bit_compute_dtype=torch.bfloat16)
    return BitsAndBytesConfig(load_in_8bit=True)


def load_causal_lm(name_or_path: str, *, dtype: str | torch.dtype = "float32", revision: Optional[str] = None,
                   attn_implementation: Optional[str] = "sdpa", quantize: Optional[str] = None,
                   liger: bool = False) -> nn.Module:
    """A Hugging Face causal LM in train mode (``from_pretrained`` returns eval mode: dropout off);
    ``attn_implementation`` ``auto``/``None``: :func:`~ifdistill.train.packed_attention.default_attn_implementation`;
    ``liger``: Liger's kernels patched in before the model is built (:func:`ifdistill.train.compile.apply_liger`)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    path = resolve_model_path(name_or_path)
    if liger:
        from ifdistill.train.compile import apply_liger

        apply_liger(AutoConfig.from_pretrained(path, revision=revision).model_type)
    kwargs: dict[str, Any] = {"dtype": torch_dtype(dtype),
                              "attn_implementation": resolve_attn_implementation(attn_implementation)}
    if revision:
        kwargs["revision"] = revision
    qconf = _quantization_config(quantize)
    if qconf is not None:
        kwargs["quantization_config"] = qconf
    model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    model.config.use_cache = False
    if qconf is not None:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    model.train()
    return model


def apply_lora(model: nn.Module, peft_cfg: Mapping[str, Any]) -> nn.Module:
    """Wrap ``model`` with a LoRA adapter; base weights frozen, adapter weights in float32 (the master copy)."""
    from peft import LoraConfig, get_peft_model

    from ifdistill.train.schemas import PeftSchema

    p = PeftSchema(**{"method": "lora", **peft_cfg})  # a key the mapping lacks: the schema's default
    cfg = LoraConfig(r=int(p.r), lora_alpha=int(p.alpha), lora_dropout=float(p.dropout),
                     target_modules=list(p.target_modules or ["q_proj", "k_proj", "v_proj", "o_proj",
                                                              "gate_proj", "up_proj", "down_proj"]),
                     bias=str(p.bias), task_type="CAUSAL_LM", use_rslora=bool(p.use_rslora))
    model = get_peft_model(model, cfg, autocast_adapter_dtype=True)
    model.train()
    return model


def build_model(model_cfg: Mapping[str, Any], peft_cfg: Optional[Mapping[str, Any]] = None, *,
                dtype: Optional[str] = None, gradient_checkpointing: bool = False,
                attn_implementation: Optional[str] = None, trainable: bool = True, liger: bool = False) -> nn.Module:
    """The model a training module wraps: base LM (+ LoRA when ``peft_cfg.method == 'lora'``).

    ``attn_implementation`` overrides ``model.attn_implementation`` (default ``auto``). A fully trained
    model (``peft.method: none``, ``trainable``) is loaded in float32 whatever ``model.dtype`` says: its
    weights are the optimizer's master weights (module docstring); a frozen model (a teacher) keeps
    ``model.dtype``."""
    peft_cfg = dict(peft_cfg or {})
    method = peft_cfg.get("method", "none")
    if method not in ("none", "lora"):
        raise ValueError(f"peft.method must be 'none' or 'lora', got {method!r}")
    quantize = peft_cfg.get("quantize") if method == "lora" else None
    dtype = dtype or model_cfg.get("dtype", ModelSchema.dtype)
    if method == "none" and trainable:
        dtype = "float32"
    model = load_causal_lm(model_cfg["name_or_path"], dtype=dtype, revision=model_cfg.get("revision"),
                           attn_implementation=attn_implementation or model_cfg.get("attn_implementation"),
                           quantize=quantize, liger=liger)
    if gradient_checkpointing:
        # Non-reentrant checkpointing needs no input gradients, so it works with frozen embeddings (LoRA).
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if method == "lora":
        model = apply_lora(model, peft_cfg)
    return model


def is_peft(model: nn.Module) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


def base_causal_lm(model: nn.Module) -> nn.Module:
    """The transformers ``*ForCausalLM`` inside a PEFT wrapper (or the model itself)."""
    return model.get_base_model() if is_peft(model) else model


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks (FSDP2 shards each one as its own unit)."""
    lm = base_causal_lm(model)
    inner = lm.get_decoder() if hasattr(lm, "get_decoder") else lm.model
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(f"cannot find decoder layers in {type(lm).__name__}")
    return list(layers)


@contextlib.contextmanager
def adapter_input_cast_off(layers: list[nn.Module], off: bool):
    """PEFT's cast of each adapted layer's input to the adapter's dtype turned off while ``off`` (module docstring)."""
    if not off or not layers:
        yield
        return
    for layer in layers:
        layer.cast_input_dtype_enabled = False
    try:
        yield
    finally:
        for layer in layers:
            layer.cast_input_dtype_enabled = True


def tuner_layers(model: nn.Module) -> list[nn.Module]:
    """PEFT's adapted layers of ``model`` (none for a model without an adapter)."""
    if not is_peft(model):
        return []
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


@contextlib.contextmanager
def adapter_disabled(model: nn.Module):
    """Run the base weights only (no-op for models without an adapter)."""
    if is_peft(model):
        with model.disable_adapter():
            yield
    else:
        yield


def causal_mask_suffices(lm: nn.Module, attention_mask: torch.Tensor) -> bool:
    """True when a right-padded batch can drop its padding mask: SDPA then runs plain causal attention.

    Under causal attention a real token only sees earlier positions, which in a right-padded row are all
    real, so its output is the same with or without the padding mask; only the padding positions'
    outputs change, and nothing reads them (no logit is taken there, they get no gradient). Without the
    mask transformers hands SDPA ``is_causal=True`` instead of a dense 4D mask, and the fused kernel
    skips the blocks above the diagonal -- about 5% of a padded SFT step on CPU, more for the long
    teacher rows of ICL distillation. Only for SDPA: flash-attention uses the mask to unpad instead.
    """
    if getattr(lm.config, "_attn_implementation", None) not in ("sdpa", PACKED_SDPA) or attention_mask.dim() != 2:
        return False
    return bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())


class SelectiveLM(nn.Module):
    """Decoder over all tokens, LM head only at ``(rows, cols)``: returns ``(N, V)`` float32 logits.

    ``prefix_ids`` (1-D, inference only): a prefix shared by every row -- the demonstrations of a
    shared-demo ICL teacher. It is run once, its key/value cache is repeated over the batch, and
    ``input_ids`` continue it (positions offset by the prefix length); ``rows``/``cols`` index the
    continuation. Equal to running ``prefix + row`` for every row, at a fraction of the cost.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self._tuner_layers = tuner_layers(model)

    def forward(self, input_ids: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, *,
                attention_mask: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None,
                cu_seqlens: Optional[torch.Tensor] = None, max_seqlen: Optional[int] = None,
                prefix_ids: Optional[torch.Tensor] = None, head: bool | Callable[[torch.Tensor, nn.Module], Any] = True
                ) -> Any:
        """``(N, V)`` float32 logits at ``(rows, cols)``; ``head=False``: the ``(N, H)`` hidden states there;
        ``head=fn``: ``fn(hidden states, LM head module)``, run inside this forward -- where FSDP2 has the
        root's parameters (the head's among them) unsharded (:mod:`ifdistill.train.chunked_head`).

        Packed rows (``position_ids`` restarting per example, ``cu_seqlens``/``max_seqlen`` of the
        collator): an implementation that reads sequence boundaries gets the rows flattened, with them
        (:mod:`ifdistill.train.packed_attention`); ``sdpa``/``eager`` get the position restarts."""
        lm = base_causal_lm(self.model)
        decoder = lm.get_decoder() if hasattr(lm, "get_decoder") else lm.model
        autocast = torch.is_autocast_enabled(input_ids.device.type)
        with adapter_input_cast_off(self._tuner_layers, off=autocast):
            if prefix_ids is not None:
                hidden = self._continue_prefix(decoder, lm.config, prefix_ids, input_ids, attention_mask)
            elif cu_seqlens is not None and passes_boundaries(getattr(lm.config, "_attn_implementation", None)):
                flat = packed_model_inputs({"input_ids": input_ids, "position_ids": position_ids,
                                            "cu_seqlens": cu_seqlens, "max_seqlen": max_seqlen},
                                           lm.config._attn_implementation)
                hidden = decoder(**flat).last_hidden_state.reshape(*input_ids.shape, -1)
            else:
                if attention_mask is not None and position_ids is None and causal_mask_suffices(lm, attention_mask):
                    attention_mask = None
                # use_cache=False: a cache object would also disable transformers' packed-sequence detection.
                hidden = decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                 use_cache=False).last_hidden_state
        hidden = hidden[rows, cols]
        if callable(head):
            return head(hidden, lm.get_output_embeddings())
        return lm.get_output_embeddings()(hidden).float() if head else hidden

    def output_head(self) -> nn.Module:
        return base_causal_lm(self.model).get_output_embeddings()

    @staticmethod
    def _continue_prefix(decoder: nn.Module, config: Any, prefix_ids: torch.Tensor, input_ids: torch.Tensor,
                         attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
        if torch.is_grad_enabled():
            raise RuntimeError("a shared prefix is for the teacher (no_grad) only")
        from transformers import DynamicCache

        batch, length = input_ids.shape
        n = prefix_ids.numel()
        cache = DynamicCache(config=config)
        decoder(input_ids=prefix_ids.reshape(1, n), use_cache=True, past_key_values=cache)
        cache.batch_repeat_interleave(batch)
        ones = torch.ones(batch, n, dtype=torch.long, device=input_ids.device)
        mask = torch.cat([ones, attention_mask if attention_mask is not None else torch.ones_like(input_ids)], 1)
        positions = (n + torch.arange(length, device=input_ids.device)).unsqueeze(0).expand(batch, length)
        return decoder(input_ids=input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                       use_cache=True).last_hidden_state


def trainable_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Detached CPU copies of the parameters that require grad (LoRA weights, or everything)."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}
