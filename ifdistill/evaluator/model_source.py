"""Which weights are evaluated: resolve the configured model, adapter or export to local directories.

Why resolve to local directories first: both backends must load *the same files*, and results.json
must name them by content (sha256 of every weight file). A hub id is therefore turned into its local
snapshot (downloaded once if the hub is reachable) before either backend sees it.

Accepted inputs (``ifdistill-eval`` keys):

- ``model.name_or_path`` alone: an HF model directory, a hub id or ``builtin:tiny``;
- ``adapter_dir``: a PEFT LoRA adapter applied to ``model.name_or_path``;
- ``export_dir``: a training export as written by ``ifdistill.callbacks.export`` (``export.json`` plus
  ``adapter/``, ``merged/`` and/or ``model/``), or directly an HF model or adapter directory.
  ``export_kind`` picks the part (``auto``: adapter, else merged, else model). An adapter's base is
  the export's ``base_model`` (what training used), else the adapter's ``base_model_name_or_path``,
  else ``model.name_or_path``.

An adapter is checked against its base before anything is started (:func:`check_adapter_matches_base`):
every LoRA module must exist in the base with matching in/out features.

A training export is verified before anything is loaded (:func:`verify_export`): every weight file of
the evaluated part must carry the sha256 that ``export.json`` recorded when the export was written, so a
file damaged on disk or in a copy is refused instead of being scored. A plain HF directory given as
``export_dir`` records no digests and is loaded as it is. Either kind is refused when a weight tensor
holds a NaN or an infinity (:func:`check_finite`: a diverged run's weights, whoever wrote them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Optional

from ifdistill.evaluator.errors import (AdapterMismatchError, CorruptExportError, ModelNotFoundError,
                                       NonFiniteWeightsError)
from ifdistill.hashing import weight_files, weight_hashes, weight_sha256
from ifdistill.runs.rundir import EXPORT_JSON

# What a snapshot needs for loading and identity (not ONNX / GGUF / original checkpoints).
HUB_PATTERNS = ["*.json", "*.safetensors", "*.jinja", "*.model", "*.txt", "*.tiktoken"]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja",
                   "chat_template.json")


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """Local directories of one evaluated model. ``kind``: model | adapter | merged."""

    model_dir: str  # full weights: the base for an adapter, else the evaluated model itself
    adapter_dir: Optional[str]
    tokenizer_dir: str
    kind: str
    configured: str  # what the config named (for results.json)
    export_dir: Optional[str] = None
    lora_rank: Optional[int] = None


def _looks_like_path(name: str) -> bool:
    """Hub ids are ``name`` or ``org/name``; anything else that does not exist is a missing directory."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def local_model_dir(name_or_path: str, revision: Optional[str] = None) -> str:
    """A local directory for a model name: itself, the built tiny model, or the hub snapshot."""
    from ifdistill.models import BUILTIN_PREFIX, ModelUnavailableError, resolve_model_path

    if name_or_path.startswith(BUILTIN_PREFIX):
        try:
            return str(Path(resolve_model_path(name_or_path)).resolve())
        except ModelUnavailableError as err:  # a built model whose source package is missing or damaged
            raise ModelNotFoundError(str(err)) from None
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ModelNotFoundError(f"{p} is a directory but holds no config.json: not an HF model directory")
        return str(p.resolve())
    if _looks_like_path(name_or_path):
        raise ModelNotFoundError(f"model directory {name_or_path!r} does not exist")
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(repo_id=name_or_path, revision=revision, allow_patterns=HUB_PATTERNS)
        if not any(Path(folder).glob("*.safetensors")):  # an older repository with .bin weights only
            folder = snapshot_download(repo_id=name_or_path, revision=revision,
                                       allow_patterns=[*HUB_PATTERNS, "*.bin"])
        return folder
    except Exception as err:  # offline and not cached, unknown repo, no permission, ...
        raise ModelNotFoundError(
            f"model {name_or_path!r} is neither a local directory nor available from the Hugging Face hub "
            f"cache or hub ({type(err).__name__}: {str(err)[:200]})") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ModelNotFoundError(f"cannot read {path}: {err}") from None


def _has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer_config.json").is_file() or (folder / "tokenizer.json").is_file()


def _pick_export_part(export: Path, kind: str) -> tuple[Path, str]:
    parts = {k: export / k for k in ("adapter", "merged", "model") if (export / k).is_dir()}
    if (export / "adapter_config.json").is_file():
        parts = {"adapter": export}
    elif (export / "config.json").is_file():
        parts = {"model": export}
    if not parts:
        raise ModelNotFoundError(f"{export} holds no model: expected config.json, adapter_config.json or an "
                                 "export with adapter/, merged/ or model/")
    if kind == "auto":
        kind = next(k for k in ("adapter", "merged", "model") if k in parts)
    if kind not in parts:
        raise ModelNotFoundError(f"export {export} has no {kind!r} part (it has {sorted(parts)})")
    return parts[kind], kind


def verify_export(export: str | os.PathLike, parts: Optional[tuple[str, ...]] = None) -> None:
    """Raise :class:`CorruptExportError` unless the weight files of ``parts`` (all parts when None) of a
    training export are exactly those ``export.json`` records, each with its recorded sha256.

    A missing file, a weight file export.json does not list (it would be loaded unverified), and a
    changed byte anywhere are each refused with the file's path. Hashes go through
    :func:`ifdistill.hashing.weight_sha256`, so the identity computed later for results.json does not
    read the files a second time.
    """
    export = Path(export)
    meta = export / EXPORT_JSON
    recorded = _read_json(meta).get("weights")
    if not isinstance(recorded, dict) or not recorded:
        raise CorruptExportError(f"{meta} records no weight digests ('weights'): the export cannot be verified; "
                                 "re-export the checkpoint")
    wanted = {rel: digest for rel, digest in recorded.items() if parts is None or rel.split("/")[0] in parts}
    on_disk = {p.relative_to(export).as_posix() for part in (parts or ("adapter", "merged", "model"))
               if (export / part).is_dir() for p in weight_files(export / part, recursive=True)}
    unrecorded = sorted(on_disk - set(wanted))
    if unrecorded:
        raise CorruptExportError(f"{export / unrecorded[0]}: weight file not recorded in {meta}; the export was "
                                 "changed after it was written")
    for rel, digest in sorted(wanted.items()):
        path = export / rel
        if not path.is_file():
            raise CorruptExportError(f"{path}: weight file recorded in {meta} is missing")
        actual = weight_sha256(path)
        if actual != digest:
            raise CorruptExportError(f"{path}: sha256 {actual[:16]}... differs from {digest[:16]}... recorded in "
                                     f"{meta}: the file is corrupt; re-export the checkpoint or evaluate another step")


def check_finite(folder: str | os.PathLike) -> None:
    """Raise :class:`NonFiniteWeightsError` naming the file and the tensor when a floating-point tensor of a
    weight file under ``folder`` holds a NaN or an infinity: such weights (a diverged run's, or a tool's
    that wrote them) would be scored as if they were a model.

    Tensors are streamed one at a time (``safe_open`` maps the file; a ``.bin`` is memory-mapped), so
    the check holds one tensor in memory and reads each byte once -- after :func:`verify_export` hashed
    the same files, from the page cache. Each tensor is summed first (one pass, no allocation); only a
    non-finite sum -- a NaN or infinity, or finite values whose sum overflows -- is checked element by
    element. Measured on 192 MiB of float32 (2 loaded cores, one run): 0.4-0.5x the time of hashing the
    file, where ``isfinite(t).all()`` on every tensor took 2.8x."""
    import torch

    def finite(t: torch.Tensor) -> bool:
        total = t.sum(dtype=torch.float64 if t.dtype == torch.float64 else torch.float32)
        return bool(torch.isfinite(total)) or bool(torch.isfinite(t).all())

    for path in weight_files(folder, recursive=True):
        for name, tensor in _tensors(path):
            if tensor.is_floating_point() and not finite(tensor):
                bad = int((~torch.isfinite(tensor)).sum())
                raise NonFiniteWeightsError(
                    f"{path}: tensor {name} holds {bad} non-finite values (NaN or infinity) of {tensor.numel()}: "
                    "these weights diverged and are not evaluated; evaluate an earlier checkpoint")


def _tensors(path: Path):
    """``(name, tensor)`` of a weight file, one at a time."""
    if path.name.endswith(".safetensors"):
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as st:
            for key in st.keys():
                yield key, st.get_tensor(key)
        return
    import torch

    yield from torch.load(path, map_location="cpu", mmap=True, weights_only=True).items()


def resolve_model_source(model_cfg: Any, *, adapter_dir: Optional[str] = None, export_dir: Optional[str] = None,
                         export_kind: str = "auto") -> ModelSource:
    """Resolve the config's model keys to a :class:`ModelSource` (checks the adapter against its base)."""
    name = str(model_cfg.get("name_or_path") or "")
    revision = model_cfg.get("revision")
    if export_dir and adapter_dir:
        raise ModelNotFoundError("set either export_dir or adapter_dir, not both")
    base_name, kind, configured, export = name, "model", name, None
    if export_dir:
        export = Path(export_dir).expanduser()
        if not export.is_dir():
            raise ModelNotFoundError(f"export directory {export_dir!r} does not exist")
        part, kind = _pick_export_part(export, export_kind)
        if part != export and (export / EXPORT_JSON).is_file():
            verify_export(export, (part.name,))
        check_finite(part)  # an export of any origin, verified or not
        configured = str(export.resolve())
        if kind == "adapter":
            adapter_dir = str(part)
            info = _read_json(export / EXPORT_JSON) if (export / EXPORT_JSON).is_file() else {}
            base_name = info.get("base_model") or _read_json(part / "adapter_config.json").get(
                "base_model_name_or_path") or name
        else:
            base_name, revision = str(part), None
    elif adapter_dir:
        kind, configured = "adapter", f"{name} + {adapter_dir}"
    if not base_name:
        raise ModelNotFoundError("no model configured: set model.name_or_path, adapter_dir or export_dir")
    model_dir = local_model_dir(base_name, revision)
    rank = None
    tokenizer_dir = model_dir
    if adapter_dir:
        adapter = Path(adapter_dir).expanduser()
        if not (adapter / "adapter_config.json").is_file():
            raise ModelNotFoundError(f"adapter directory {adapter_dir!r} does not exist or has no adapter_config.json")
        adapter_dir = str(adapter.resolve())
        rank = int(_read_json(adapter / "adapter_config.json").get("r") or 0) or None
        check_adapter_matches_base(adapter_dir, model_dir)
        if _has_tokenizer(adapter):
            tokenizer_dir = adapter_dir
    return ModelSource(model_dir=model_dir, adapter_dir=adapter_dir, tokenizer_dir=tokenizer_dir,
                       kind="merged" if kind == "merged" else ("adapter" if adapter_dir else "model"),
                       configured=configured, export_dir=str(export.resolve()) if export else None,
                       lora_rank=rank)


# -- adapter / base compatibility -------------------------------------------------------------------

def _tensor_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the tensors in a directory's weight files, read from the headers only."""
    shapes: dict[str, tuple[int, ...]] = {}
    files = sorted(folder.glob("*.safetensors"))
    if files:
        from safetensors import safe_open

        for f in files:
            with safe_open(str(f), framework="pt") as st:
                for key in st.keys():
                    shapes[key] = tuple(st.get_slice(key).get_shape())
        return shapes
    import torch

    for f in sorted(folder.glob("*.bin")):
        state = torch.load(f, map_location="meta", weights_only=True)
        shapes.update({k: tuple(v.shape) for k, v in state.items()})
    return shapes


def _strip(name: str) -> str:
    for prefix in ("base_model.model.", "base_model."):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def check_adapter_matches_base(adapter_dir: str, model_dir: str) -> None:
    """Raise :class:`AdapterMismatchError` unless every LoRA module fits a Linear of the base.

    For ``<module>.lora_A.weight`` of shape (r, in) and ``<module>.lora_B.weight`` of shape (out, r)
    the base must hold ``<module>.weight`` of shape (out, in). Names are compared with and without
    the ``model.`` prefix some exports drop.
    """
    adapter_shapes = _tensor_shapes(Path(adapter_dir))
    if not adapter_shapes:
        raise AdapterMismatchError(f"adapter {adapter_dir} has no weight file (adapter_model.safetensors)")
    base_shapes = {_strip(k): v for k, v in _tensor_shapes(Path(model_dir)).items()}
    problems = []
    for key, shape_a in sorted(adapter_shapes.items()):
        if ".lora_A." not in key:
            continue
        module = _strip(key.split(".lora_A.")[0])
        shape_b = adapter_shapes.get(key.replace(".lora_A.", ".lora_B."))
        base = base_shapes.get(module + ".weight") or base_shapes.get(module.removeprefix("model.") + ".weight")
        if base is None:
            problems.append(f"{module}: not in the base model")
        elif len(base) == 2 and shape_b is not None and (base[1] != shape_a[-1] or base[0] != shape_b[0]):
            problems.append(f"{module}: base weight {list(base)} vs adapter in={shape_a[-1]} out={shape_b[0]}")
        if len(problems) >= 5:
            break
    if problems:
        raise AdapterMismatchError(f"adapter {adapter_dir} does not match base model {model_dir}: "
                                   + "; ".join(problems))


# -- identity ---------------------------------------------------------------------------------------

def tokenizer_hash(folder: str, chat_template: str) -> str:
    """sha256 over the tokenizer files of ``folder`` and the chat template actually used."""
    h = hashlib.sha256()
    for name in TOKENIZER_FILES:
        p = Path(folder) / name
        if p.is_file():
            h.update(name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    h.update(b"template\0" + chat_template.encode())
    return h.hexdigest()


def model_identity(source: ModelSource, chat_template: str) -> dict[str, Any]:
    """The evaluated model as results.json records it: paths and content hashes."""
    adapter_cfg = None
    if source.adapter_dir:
        raw = _read_json(Path(source.adapter_dir) / "adapter_config.json")
        adapter_cfg = {k: raw.get(k) for k in ("peft_type", "r", "lora_alpha", "target_modules", "use_rslora",
                                               "base_model_name_or_path")}
        if isinstance(adapter_cfg.get("target_modules"), list):
            adapter_cfg["target_modules"] = sorted(adapter_cfg["target_modules"])
    weights = weight_hashes(source.model_dir)
    adapter_weights = weight_hashes(source.adapter_dir) if source.adapter_dir else {}
    digest = hashlib.sha256(json.dumps([weights, adapter_weights], sort_keys=True).encode()).hexdigest()
    return {
        "configured": source.configured,
        "kind": source.kind,
        "path": source.model_dir,
        "adapter_path": source.adapter_dir,
        "export_dir": source.export_dir,
        "tokenizer_path": source.tokenizer_dir,
        "weights_sha256": weights,
        "adapter_weights_sha256": adapter_weights,
        "weights_digest": digest,
        "tokenizer_sha256": tokenizer_hash(source.tokenizer_dir, chat_template),
        "chat_template_sha256": hashlib.sha256(chat_template.encode()).hexdigest(),
        "adapter_config": adapter_cfg,
    }


def context_length(model_dir: str) -> Optional[int]:
    """The model's own maximum sequence length from config.json (None if it states none)."""
    cfg = _read_json(Path(model_dir) / "config.json")
    cfg = cfg.get("text_config", cfg)
    for key in ("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions"):
        if isinstance(cfg.get(key), int):
            return cfg[key]
    return None
