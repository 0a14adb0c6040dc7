"""What the embedded models share: an architecture spec, random-init weights, and a build-once cache entry.

Both embedded models (:mod:`ifdistill.models.tiny`, :mod:`ifdistill.models.tiny_qwen3`) are built from
a frozen spec whose fields and builder version name their cache entry
(``cache_dir()/models/<prefix>-<hash>``), so a changed spec never reuses old files, and a marker
JSON of the spec is written last, so a half-built folder is never taken for a finished one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ifdistill.paths import build_once, cache_dir


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    """A decoder's sizes and the seed of its weights; the defaults are the ChatML tiny model's.

    head_dim is 64 because vLLM's CPU attention rejects head sizes below 32 and 64 is the size
    verified everywhere; ``vocab_size`` is the number of embedding rows.
    """

    seed: int = 0
    vocab_size: int = 2048
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    max_position_embeddings: int = 4096


#: The fields of :class:`ArchSpec` that go into the model config as they are.
ARCH_FIELDS = tuple(f.name for f in dataclasses.fields(ArchSpec) if f.name not in ("seed", "vocab_size"))


def _described(spec: ArchSpec, builder_version: int) -> dict:
    return {"builder": builder_version, **dataclasses.asdict(spec)}


def spec_key(spec: ArchSpec, builder_version: int, files: Iterable[Path] = ()) -> str:
    """12 hex digits naming a build: the spec, the builder version and the bytes of ``files``
    (inputs copied into the model, such as tokenizer files), each with its name."""
    h = hashlib.sha256(json.dumps(_described(spec, builder_version), sort_keys=True).encode())
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def write_marker(out: Path, marker: str, spec: ArchSpec, builder_version: int) -> None:
    """The spec as JSON in ``out/marker``: the last file a build writes."""
    (out / marker).write_text(json.dumps(_described(spec, builder_version), indent=2) + "\n")


def cached_build(prefix: str, key: str, marker: str, build: Callable[[Path], Path],
                 root: str | os.PathLike | None = None) -> Path:
    """``<root or cache_dir()/models>/<prefix>-<key>``, built by ``build`` on first use (atomically,
    once across processes, see :func:`ifdistill.paths.build_once`)."""
    base = Path(root) if root is not None else cache_dir() / "models"
    return build_once(base / f"{prefix}-{key}", marker, build)


def save_random_causal_lm(out: Path, config_cls, model_cls, spec: ArchSpec, *, eos_token_id: int,
                          pad_token_id: int, vocab_size: int | None = None, **extra) -> None:
    """A random-init causal LM of ``spec``'s architecture (:data:`ARCH_FIELDS`, seeded by ``spec.seed``,
    ``vocab_size`` embedding rows, by default ``spec.vocab_size``) with tied embeddings, fp32 and a
    greedy generation config, saved into ``out``."""
    import torch
    from transformers import GenerationConfig

    config = config_cls(vocab_size=spec.vocab_size if vocab_size is None else vocab_size,
                        **{f: getattr(spec, f) for f in ARCH_FIELDS}, **extra,
                        tie_word_embeddings=True, bos_token_id=None, eos_token_id=eos_token_id,
                        pad_token_id=pad_token_id, torch_dtype="float32")
    torch.manual_seed(spec.seed)
    model = model_cls(config)
    model.generation_config = GenerationConfig(
        eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id, do_sample=False
    )
    model.save_pretrained(out, safe_serialization=True)
