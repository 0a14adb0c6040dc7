"""LoRA load-path check on the tiny model: live == reloaded == merged, and a wrong adapter is caught."""

from __future__ import annotations

import json

import pytest

from ifdistill.cli.report import main
from ifdistill.results.lora_check import check_lora_load_paths, render_markdown

# Three model loads and four greedy generations per check: ~30-60 s of CPU on the 2-core machine.
pytestmark = pytest.mark.slow

PROMPTS = [
    {"key": "1", "prompt": "Write a short poem about the sea without any commas.",
     "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
    {"key": "2", "prompt": "Answer in lowercase letters only: what is a river?",
     "instruction_id_list": ["change_case:english_lowercase"], "kwargs": [{}]},
    {"key": "3", "prompt": "Give two bullet points about music.",
     "instruction_id_list": ["detectable_format:number_bullet_lists"], "kwargs": [{"num_bullets": 2}]},
]


def _adapter(base_dir, seed: int):
    """A LoRA model on the tiny base with non-zero B (so the adapter changes the output)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(base_dir)),
                           LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    return model.eval()


@pytest.fixture(scope="module")
def adapters(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    a, b = _adapter(tiny_model_dir, 0), _adapter(tiny_model_dir, 1)
    a.save_pretrained(root / "adapter_a")
    return tiny_model_dir, root, a, b


def test_live_reloaded_and_merged_agree(adapters):
    base, root, live_a, _ = adapters
    result = check_lora_load_paths(base, root / "adapter_a", PROMPTS, live_model=live_a, max_new_tokens=12)
    assert result["paths"] == ["live", "reloaded", "merged"] and result["live"] == "given"
    assert result["all_agree"], render_markdown(result)
    assert all(a["identical"] == len(PROMPTS) for a in result["agreement"].values())
    assert all(v == 0 for diffs in result["metric_differences"].values() for v in diffs.values())
    assert result["adapter_changes_output"] >= 1  # otherwise agreement would prove nothing


def test_a_different_live_adapter_is_caught(adapters):
    base, root, _, live_b = adapters
    result = check_lora_load_paths(base, root / "adapter_a", PROMPTS[:2], live_model=live_b, max_new_tokens=8)
    assert not result["all_agree"]
    assert result["agreement"]["live_vs_reloaded"]["identical"] < 2
    assert result["agreement"]["reloaded_vs_merged"]["identical"] == 2
    md = render_markdown(result)
    assert "The load paths disagree" in md and "live vs reloaded from token" in md


def test_cli_rebuilds_the_live_model_and_checks_a_merged_export(adapters, tmp_path, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base, root, _, _ = adapters
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base)), str(root / "adapter_a"))
    merged.merge_and_unload().save_pretrained(tmp_path / "merged")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    code = main(["lora-check", str(base), str(root / "adapter_a"), "--merged", str(tmp_path / "merged"),
                 "--prompts", str(prompts), "--limit", "2", "--max-new-tokens", "6", "-o", str(tmp_path / "out"),
                 "--fail-on-mismatch"])
    assert code == 0, capsys.readouterr().out
    result = json.loads((tmp_path / "out" / "lora_check.json").read_text())
    assert result["live"] == "rebuilt" and result["n_prompts"] == 2
    assert result["paths"] == ["live", "reloaded", "merged", "merged_export"] and result["all_agree"]
    assert "All paths agree" in (tmp_path / "out" / "lora_check.md").read_text()
