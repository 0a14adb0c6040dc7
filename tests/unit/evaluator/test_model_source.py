"""What is evaluated: model / adapter / export resolution, clear errors, adapter-vs-base check, identity."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from ifdistill.hashing import weight_hashes
from ifdistill.evaluator.errors import AdapterMismatchError, CorruptExportError, ModelNotFoundError
from ifdistill.evaluator.model_source import (check_adapter_matches_base, model_identity, resolve_model_source,
                                              tokenizer_hash, verify_export)
from tests.support import flip_bytes


@pytest.fixture(scope="module")
def adapter_dir(tiny_model_dir, tmp_path_factory):
    """An untrained LoRA adapter (r=4) of the tiny model, saved as PEFT writes it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("adapter") / "adapter"
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def other_base(tmp_path_factory):
    """A Qwen2 model of another width: the adapter above does not fit it."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = tmp_path_factory.mktemp("other") / "base"
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=2048, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                                 num_attention_heads=2, num_key_value_heads=1, head_dim=64)).save_pretrained(out)
    return out


def _model(path) -> dict:
    return {"name_or_path": str(path), "revision": None}


def test_a_model_directory_and_the_builtin_tiny_resolve(tiny_model_dir):
    for name in (str(tiny_model_dir), "builtin:tiny"):
        src = resolve_model_source(_model(name))
        assert src.model_dir == str(Path(tiny_model_dir).resolve()) and src.adapter_dir is None
        assert src.kind == "model" and src.tokenizer_dir == src.model_dir


def test_missing_model_directories_are_clear_errors(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model_source(_model(tmp_path / "nope"))
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model_source(_model(tmp_path))
    with pytest.raises(ModelNotFoundError, match="neither a local directory nor available"):
        resolve_model_source(_model("ifdistill-test/no-such-model"))  # offline in tests: not in the cache
    with pytest.raises(ModelNotFoundError, match="export directory"):
        resolve_model_source(_model("builtin:tiny"), export_dir=str(tmp_path / "exports" / "step_000001"))
    with pytest.raises(ModelNotFoundError, match="adapter directory"):
        resolve_model_source(_model("builtin:tiny"), adapter_dir=str(tmp_path))


def test_an_adapter_on_its_base(tiny_model_dir, adapter_dir):
    src = resolve_model_source(_model("builtin:tiny"), adapter_dir=str(adapter_dir))
    assert src.kind == "adapter" and src.adapter_dir == str(adapter_dir.resolve()) and src.lora_rank == 4
    assert src.tokenizer_dir == src.model_dir  # the adapter folder holds no tokenizer


def test_an_adapter_that_does_not_fit_its_base_is_refused(adapter_dir, other_base, tmp_path):
    with pytest.raises(AdapterMismatchError, match="does not match base model"):
        resolve_model_source(_model(other_base), adapter_dir=str(adapter_dir))
    # a LoRA module the base does not have at all
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(adapter_dir, broken)
    weights = load_file(broken / "adapter_model.safetensors")
    renamed = {k.replace("layers.0.self_attn.q_proj", "layers.0.self_attn.qq_proj"): v for k, v in weights.items()}
    save_file(renamed, broken / "adapter_model.safetensors")
    with pytest.raises(AdapterMismatchError, match="qq_proj: not in the base model"):
        check_adapter_matches_base(str(broken), str(Path(other_base)))


def _export(root: Path, tiny_model_dir: Path, adapter_dir: Path, parts: tuple[str, ...]) -> Path:
    """An export as ifdistill.callbacks.export writes it (weights copied, export.json)."""
    export = root / "exports" / "step_000200"
    export.mkdir(parents=True)
    if "adapter" in parts:
        shutil.copytree(adapter_dir, export / "adapter")
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(tiny_model_dir / name, export / "adapter" / name)
    for part in ("merged", "model"):
        if part in parts:
            shutil.copytree(tiny_model_dir, export / part)
    (export / "export.json").write_text(json.dumps({"step": 200, "kinds": list(parts), "base_model": str(tiny_model_dir),
                                                    "weights": weight_hashes(export, recursive=True)}))
    return export


def test_a_corrupt_missing_or_unrecorded_export_weight_file_is_refused(tiny_model_dir, adapter_dir, tmp_path):
    export = _export(tmp_path, Path(tiny_model_dir), adapter_dir, ("adapter", "merged"))
    nothing = {"name_or_path": "", "revision": None}
    flip_bytes(export / "merged" / "model.safetensors")
    with pytest.raises(CorruptExportError, match=r"merged/model\.safetensors: sha256 .* differs"):
        resolve_model_source(nothing, export_dir=str(export), export_kind="merged")
    assert resolve_model_source(nothing, export_dir=str(export)).kind == "adapter"  # its own files are intact
    with pytest.raises(CorruptExportError, match=r"merged/model\.safetensors"):
        verify_export(export)  # all parts: what back-fill checks
    shutil.copy(export / "adapter" / "adapter_model.safetensors", export / "adapter" / "extra.safetensors")
    with pytest.raises(CorruptExportError, match=r"adapter/extra\.safetensors: weight file not recorded"):
        resolve_model_source(nothing, export_dir=str(export))
    (export / "adapter" / "extra.safetensors").unlink()
    (export / "adapter" / "adapter_model.safetensors").unlink()
    with pytest.raises(CorruptExportError, match=r"adapter_model\.safetensors: weight file recorded .* is missing"):
        resolve_model_source(nothing, export_dir=str(export))
    (export / "export.json").write_text(json.dumps({"step": 200, "base_model": str(tiny_model_dir)}))
    with pytest.raises(CorruptExportError, match="records no weight digests"):
        resolve_model_source(nothing, export_dir=str(export))


def test_export_parts_and_base_model(tiny_model_dir, adapter_dir, tmp_path):
    tiny_model_dir = Path(tiny_model_dir)
    export = _export(tmp_path, tiny_model_dir, adapter_dir, ("adapter", "merged"))
    nothing = {"name_or_path": "", "revision": None}  # the export names its own base
    auto = resolve_model_source(nothing, export_dir=str(export))
    assert auto.kind == "adapter" and auto.adapter_dir == str((export / "adapter").resolve())
    assert auto.model_dir == str(tiny_model_dir.resolve()) and auto.tokenizer_dir == auto.adapter_dir
    assert auto.export_dir == str(export.resolve())
    merged = resolve_model_source(nothing, export_dir=str(export), export_kind="merged")
    assert merged.kind == "merged" and merged.adapter_dir is None
    assert merged.model_dir == str((export / "merged").resolve())
    with pytest.raises(ModelNotFoundError, match="no 'model' part"):
        resolve_model_source(nothing, export_dir=str(export), export_kind="model")
    # a plain HF directory or adapter directory works as export_dir too
    assert resolve_model_source(nothing, export_dir=str(export / "merged")).kind == "model"
    plain = resolve_model_source(_model("builtin:tiny"), export_dir=str(adapter_dir))
    assert plain.kind == "adapter" and plain.model_dir == str(tiny_model_dir.resolve())
    with pytest.raises(ModelNotFoundError, match="either export_dir or adapter_dir"):
        resolve_model_source(nothing, export_dir=str(export), adapter_dir=str(adapter_dir))


def test_identity_hashes_the_files_that_are_loaded(tiny_model_dir, adapter_dir):
    src = resolve_model_source(_model("builtin:tiny"), adapter_dir=str(adapter_dir))
    ident = model_identity(src, "T")
    weights = Path(tiny_model_dir) / "model.safetensors"
    assert ident["weights_sha256"] == {"model.safetensors": hashlib.sha256(weights.read_bytes()).hexdigest()}
    assert set(ident["adapter_weights_sha256"]) == {"adapter_model.safetensors"}
    assert ident["adapter_config"]["r"] == 4 and ident["adapter_config"]["target_modules"] == sorted(
        ["q_proj", "v_proj", "down_proj"])
    assert ident["chat_template_sha256"] == hashlib.sha256(b"T").hexdigest()
    assert tokenizer_hash(src.tokenizer_dir, "T") != tokenizer_hash(src.tokenizer_dir, "U")
