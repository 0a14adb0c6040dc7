"""Model identities: resolve a configured ``name_or_path`` to something transformers/vLLM can load.

``builtin:tiny`` (a ChatML Qwen2, :mod:`ifdistill.models.tiny`) and ``builtin:tiny_qwen3`` (Qwen3's
real tokenizer and template on a small random-init Qwen3, :mod:`ifdistill.models.tiny_qwen3`) name
the embedded models, built locally and cached; any other value is an HF directory or hub id and is
passed through unchanged.
"""

from __future__ import annotations

BUILTIN_PREFIX = "builtin:"
BUILTINS = ("tiny", "tiny_qwen3")


def resolve_model_path(name_or_path: str) -> str:
    """Local directory or hub id for ``name_or_path``; builds an embedded model on first use."""
    if name_or_path.startswith(BUILTIN_PREFIX):
        name = name_or_path[len(BUILTIN_PREFIX):]
        if name == "tiny":
            from ifdistill.models.tiny import tiny_model_path

            return str(tiny_model_path())
        if name == "tiny_qwen3":
            from ifdistill.models.tiny_qwen3 import tiny_qwen3_path

            return str(tiny_qwen3_path())
        raise ValueError(f"unknown builtin model {name_or_path!r}; known: "
                         + ", ".join(BUILTIN_PREFIX + b for b in BUILTINS))
    return name_or_path
