"""The embedded Qwen3 model (``model=tiny_qwen3``): Qwen3's real tokenizer and chat template on a small
random-init ``Qwen3ForCausalLM``.

Why a second embedded model: the people who use ifdistill train Qwen3, whose chat template renders the
last assistant turn with a ``<think>`` block, appends an empty think block to the generation prompt
only when ``enable_thinking=False``, and whose ``<think>``/``</think>`` are added tokens that are not
special. The ChatML tiny model (:mod:`ifdistill.models.tiny`) exercises none of that, nor Qwen3's
q/k norms. This model does, offline: the tokenizer files come from the shared data folder
(``<shared>/qwen3_tokenizer``, the real vocabulary and template; see its README) and the weights are
built from a seed.

Size: the real vocabulary (151,936 embedding rows as in Qwen3's config) dominates; the body is kept
small (hidden 128, 2 layers, 2 query heads / 1 KV head of head_dim 64 -- vLLM's CPU attention needs
head_dim >= 32, 64 is the size verified everywhere) and the embeddings are tied, so the model has
~19.6 M parameters (~79 MB in fp32).

Deterministic (same spec, seed and tokenizer files -> byte-identical files) and cached under
``cache_dir()/models/tiny_qwen3-<hash of spec, builder version and tokenizer files>``, built once
across processes by :func:`ifdistill.paths.build_once`; the weights are never committed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from ifdistill.models.random_init import ArchSpec, cached_build, save_random_causal_lm, spec_key, write_marker
from ifdistill.paths import MissingResourceError, shared_data_dir

BUILDER_VERSION = 1
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
MARKER = "ifdistill_tiny_qwen3.json"


@dataclasses.dataclass(frozen=True)
class TinyQwen3Spec(ArchSpec):
    """Everything besides the tokenizer files that determines the built files (the sizes:
    :data:`TINY_QWEN3`)."""

    rope_theta: float = 1000000.0
    rms_norm_eps: float = 1e-6


#: The built model: Qwen3's 151,936 embedding rows (the tokenizer has 151,669 tokens) on a small body.
TINY_QWEN3 = TinyQwen3Spec(vocab_size=151936, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1)


def qwen3_tokenizer_dir() -> Path:
    """``<shared data>/qwen3_tokenizer``: the real Qwen3 tokenizer files (an error names what is missing)."""
    folder = shared_data_dir() / "qwen3_tokenizer"
    missing = [n for n in TOKENIZER_FILES if not (folder / n).is_file()]
    if missing:
        raise MissingResourceError(f"the Qwen3 tokenizer folder {folder} lacks {missing}; it holds the real "
                                   "Qwen3 vocabulary and chat template that model=tiny_qwen3 is built with")
    return folder


def build_tiny_qwen3(out_dir: str | os.PathLike, spec: TinyQwen3Spec = TINY_QWEN3,
                     tokenizer_dir: str | os.PathLike | None = None) -> Path:
    """Copy the tokenizer files and build a random-init Qwen3 into ``out_dir`` (HF format, fp32)."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    src = Path(tokenizer_dir) if tokenizer_dir is not None else qwen3_tokenizer_dir()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:  # byte copies: the model directory carries the exact shared files
        shutil.copyfile(src / name, out / name)
    tokenizer = AutoTokenizer.from_pretrained(out)
    if len(tokenizer) > spec.vocab_size:
        raise ValueError(f"the tokenizer in {src} has {len(tokenizer)} tokens, more than vocab_size {spec.vocab_size}")
    save_random_causal_lm(out, Qwen3Config, Qwen3ForCausalLM, spec, eos_token_id=tokenizer.eos_token_id,
                          pad_token_id=tokenizer.pad_token_id, rope_theta=spec.rope_theta, rms_norm_eps=spec.rms_norm_eps)
    write_marker(out, MARKER, spec, BUILDER_VERSION)
    return out


def tiny_qwen3_path(spec: TinyQwen3Spec = TINY_QWEN3, root: str | os.PathLike | None = None) -> Path:
    """The cached tiny Qwen3 directory, built on first use (atomically, once across processes)."""
    tokenizer_dir = qwen3_tokenizer_dir()
    key = spec_key(spec, BUILDER_VERSION, [tokenizer_dir / name for name in TOKENIZER_FILES])
    return cached_build("tiny_qwen3", key, MARKER, lambda tmp: build_tiny_qwen3(tmp, spec, tokenizer_dir), root)
