"""Model identities: resolve a configured ``name_or_path`` to something transformers/vLLM can load.

``builtin:tiny`` names the embedded default (built locally, see :mod:`ifdistill.models.tiny`); any
other value is an HF directory or hub id and is passed through unchanged.
"""

from __future__ import annotations

BUILTIN_PREFIX = "builtin:"


def resolve_model_path(name_or_path: str) -> str:
    """Local directory or hub id for ``name_or_path``; builds the tiny model on first use."""
    if name_or_path.startswith(BUILTIN_PREFIX):
        name = name_or_path[len(BUILTIN_PREFIX):]
        if name != "tiny":
            raise ValueError(f"unknown builtin model {name_or_path!r}; known: builtin:tiny")
        from ifdistill.models.tiny import tiny_model_path

        return str(tiny_model_path())
    return name_or_path
