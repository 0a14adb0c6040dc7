"""The embedded tiny model: deterministic build, loads in transformers, takes LoRA, runs in vLLM-CPU."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support import require

SCRIPTS = Path(__file__).parent / "scripts"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_is_deterministic(tmp_path, tiny_model_dir):
    from ifdistill.models.tiny import TinySpec, build_tiny_model

    again = build_tiny_model(tmp_path / "again", TinySpec())
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert _sha(again / name) == _sha(Path(tiny_model_dir) / name), name


def test_loads_in_transformers_with_chat_template(tiny_model_dir, tiny_tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    cfg = model.config
    assert cfg.model_type == "qwen2" and cfg.head_dim >= 64
    assert cfg.vocab_size >= len(tiny_tokenizer)
    text = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}], tokenize=False
    )
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello there<|im_end|>\n"
    # Byte-level BPE round-trips any text, including non-ASCII.
    sample = "Ünïcödé — 日本語, <<title>> P.S. {\"a\": 1}"
    assert tiny_tokenizer.decode(tiny_tokenizer(sample)["input_ids"]) == sample
    ids = torch.tensor([tiny_tokenizer("The ocean is")["input_ids"]])
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], cfg.vocab_size) and torch.isfinite(logits).all()


def test_takes_a_peft_lora_adapter(tiny_model_dir, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.arange(5, 25).unsqueeze(0)
    ref = base(ids).logits.detach()
    lora = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))
    assert lora.get_nb_trainable_parameters()[0] > 0
    torch.testing.assert_close(lora(ids).logits, ref)  # lora_B starts at zero
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    lora.save_pretrained(tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tmp_path / "adapter")
    out = reloaded(ids).logits.detach()
    assert not torch.allclose(out, ref)
    torch.testing.assert_close(out, lora(ids).logits.detach())


@pytest.mark.slow
def test_generates_in_vllm_cpu_in_a_separate_process(tiny_model_dir, tiny_tokenizer):
    try:
        import vllm  # noqa: F401
    except ImportError:
        require(False, "vllm is not installed")
    from transformers import AutoModelForCausalLM

    prompts = [tiny_tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                                  tokenize=False) for t in ("Write a poem.", "List three cities.")]
    prompt_ids = [tiny_tokenizer(p)["input_ids"] for p in prompts]
    out = subprocess.run([sys.executable, str(SCRIPTS / "vllm_generate.py"), str(tiny_model_dir),
                          json.dumps(prompt_ids), "--max-tokens", "12"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    generated = json.loads(line[len("RESULT "):])
    assert [len(g) for g in generated] == [12, 12]
    # Same greedy continuation as transformers (random init, so compare ids, not quality).
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for ids, got in zip(prompt_ids, generated):
        ref = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(ids):].tolist()
        assert got == ref


def test_tiny_qwen3_is_deterministic_and_carries_the_shared_tokenizer(tmp_path, tiny_qwen3_dir):
    """builtin:tiny_qwen3: same files on a rebuild, the shared Qwen3 tokenizer files byte for byte, a
    Qwen3 architecture (q/k norms) with the real vocabulary size, and the checked ids of the README."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ifdistill.models import resolve_model_path
    from ifdistill.models.tiny_qwen3 import TOKENIZER_FILES, build_tiny_qwen3, qwen3_tokenizer_dir

    assert Path(resolve_model_path("builtin:tiny_qwen3")) == Path(tiny_qwen3_dir)
    again = build_tiny_qwen3(tmp_path / "again")
    for name in ("model.safetensors", "config.json", *TOKENIZER_FILES):
        assert _sha(again / name) == _sha(Path(tiny_qwen3_dir) / name), name
    for name in TOKENIZER_FILES:
        assert _sha(Path(tiny_qwen3_dir) / name) == _sha(qwen3_tokenizer_dir() / name), name
    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3_dir)
    cfg = model.config
    assert cfg.model_type == "qwen3" and cfg.vocab_size == 151936 and cfg.head_dim >= 64 and cfg.tie_word_embeddings
    assert hasattr(model.model.layers[0].self_attn, "q_norm")
    tok = AutoTokenizer.from_pretrained(tiny_qwen3_dir)
    assert tok("Hello world")["input_ids"] == [9707, 1879] and tok.eos_token_id == 151645
    assert tok("<|im_start|>assistant\n")["input_ids"] == [151644, 77091, 198]
    logits = model(torch.tensor([tok("The ocean is")["input_ids"]])).logits
    assert logits.shape[-1] == 151936 and torch.isfinite(logits).all()
