"""The multi-turn benchmark: the whole conversation rendered by the model's chat template (Qwen3's real one,
checked against its documented layout), what enters eval_config_hash (``prepare``, no engine), and both scores
of an evaluation on the tiny model (transformers, seconds) recomputed from its rows."""

from __future__ import annotations

import json
import shutil

import pytest

from ifdistill.config import ConfigError
from ifdistill.evaluator import run as run_module
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.run import prepare
from ifdistill.paths import shared_data_dir
from tests.unit.ifeval_multiturn.test_conversations import GPT4, _published_rows

BASE = ["eval=ifeval_multiturn", "eval.data.max_examples=6", "eval.generation.max_new_tokens=64"]


@pytest.fixture(autouse=True)
def _no_process_changes(monkeypatch):
    monkeypatch.setattr(run_module, "apply_runtime", lambda runtime: None)


def _plan(tmp_path, *overrides: str):
    return prepare(load_config([*BASE, *overrides], output_dir=str(tmp_path / "out")))


def _qwen3_chatml(messages: list[dict]) -> str:
    """Qwen3's layout as its template documents it (../shared/data/qwen3_tokenizer/README.md): each turn
    ``<|im_start|>{role}\\n{content}<|im_end|>\\n``; an assistant turn before the last user turn is printed
    without a think block; the generation prompt with thinking off ends with an empty think block."""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_the_whole_conversation_is_rendered_by_qwen3s_template(tmp_path, tiny_qwen3_dir, qwen3_tokenizer):
    plan = _plan(tmp_path, "model=tiny_qwen3")
    assert len(plan.prompts) == 6
    for p in plan.prompts[:3]:
        messages = list(p.example.messages)
        assert [m["role"] for m in messages] == ["user", "assistant", "user"]
        text = plan.tokenizer.decode(list(p.token_ids), skip_special_tokens=False)
        assert text == _qwen3_chatml(messages)
        # and exactly what the template itself prints, tokenised as the tokenizer does
        assert text == qwen3_tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                           enable_thinking=False, tokenize=False)
        assert list(p.token_ids) == qwen3_tokenizer(_qwen3_chatml(messages), add_special_tokens=False)["input_ids"]


def test_the_plan_knows_which_instructions_are_new(tmp_path):
    plan = _plan(tmp_path)
    for p in plan.prompts:
        carried = plan.carried[p.key]
        assert carried == len(p.example.instruction_id_list) - 1 >= 1
    assert plan.data.identity["responses"]["sha256"] and plan.data.identity["source_rows_sha256"]
    assert plan.fingerprint["multiturn"]["generator_version"] == "1"


def test_every_setting_and_the_generator_enter_the_hash_and_a_moved_responses_file_does_not(tmp_path, monkeypatch):
    base = _plan(tmp_path).eval_config_hash
    assert _plan(tmp_path, "eval.multiturn.seed=1").eval_config_hash != base
    assert _plan(tmp_path, "eval.multiturn.instructions=[punctuation:no_comma]").eval_config_hash != base
    moved = tmp_path / "elsewhere.jsonl"
    shutil.copy(GPT4, moved)
    assert _plan(tmp_path, f"eval.multiturn.responses={moved}").eval_config_hash == base
    rows = [json.loads(line) for line in moved.read_text().splitlines()]
    rows[0]["response"] += " Anything else?"
    moved.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert _plan(tmp_path, f"eval.multiturn.responses={moved}").eval_config_hash != base
    from ifdistill.benchmarks.ifeval_multiturn import conversations

    monkeypatch.setattr(conversations, "GENERATOR_VERSION", "2")
    assert _plan(tmp_path).eval_config_hash != base


def test_the_published_layout_through_prepare_scores_the_final_turn_only(tmp_path):
    path = tmp_path / "mt.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _published_rows()))
    plan = _plan(tmp_path, f"eval.data.path={path}")
    assert plan.carried == {"7": 0, "8": 0} and plan.skipped == []
    text = plan.tokenizer.decode(list(plan.prompts[0].token_ids), skip_special_tokens=False)
    turns = _published_rows()[0]["messages"]
    assert all(m["content"] in text for m in turns) and text.index(turns[1]["content"]) < text.index(turns[2]["content"])
    assert "ifbench" in plan.fingerprint["scorer_version"]  # the IFBench row: its checkers' version joins IFEval's


def test_an_unknown_instruction_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"eval.multiturn.instructions: no wording for \['keywords:palindrome'\]"):
        _plan(tmp_path, "eval.multiturn.instructions=[keywords:palindrome]")


def test_the_default_data_is_ifevals_shared_copy_and_gpt4s_responses(tmp_path):
    identity = _plan(tmp_path).data.identity
    assert [f["path"] for f in identity["files"]] == [str(shared_data_dir() / "ifeval" / "input_data.jsonl")]
    assert identity["responses"]["path"] == str(GPT4) and identity["responses"]["rows"] == 541


def test_both_scores_and_their_standard_errors_from_each_replys_decisions():
    """own_scores on scored rows: each row's own isolation / persistence, then their shares with the binomial
    standard error; a published conversation (nothing carried) has isolation only. (The tiny model's replies go
    through it in the contract test, tests/integration/test_benchmark_contract.py.)"""
    import math
    import types

    from ifdistill.benchmarks import registry

    def row(key, strict, loose):
        return {"key": key, "instruction_id_list": ["a", "b", "new"][-len(strict):], "strict_inst": strict,
                "loose_inst": loose}

    rows = [row("1", [True, True, True], [True, True, True]), row("2", [False, True, True], [True, True, True]),
            row("3", [True, True, False], [True, True, True]), row("4", [True, False], [True, True])]
    plan = types.SimpleNamespace(carried={"1": 2, "2": 2, "3": 2, "4": 0}, skipped=["9"])
    metrics, counts = registry.get("ifeval_multiturn").own_scores(plan, rows)
    assert [r["metrics"]["isolation_strict_acc"] for r in rows] == [1.0, 1.0, 0.0, 0.0]
    assert [r["metrics"].get("persistence_strict_acc") for r in rows] == [1.0, 0.0, 0.0, None]
    assert rows[0]["new_instruction_ids"] == ["new"] and rows[3]["new_instruction_ids"] == ["b", "new"]
    assert metrics["isolation_strict_acc"] == 0.5 and metrics["isolation_loose_acc"] == 1.0
    assert metrics["persistence_strict_acc"] == 1 / 3 and metrics["persistence_loose_acc"] == 1.0
    # sqrt(p (1 - p) / (n - 1)); the tolerance: the two orders of the same three float operations
    assert metrics["isolation_strict_acc_stderr"] == pytest.approx(math.sqrt(0.5 * 0.5 / 3), rel=1e-15)
    assert metrics["persistence_strict_acc_stderr"] == pytest.approx(math.sqrt((1 / 3) * (2 / 3) / 2), rel=1e-15)
    assert counts == {"persistence_conversations": 3, "skipped_rows": 1}
