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


def test_an_evaluation_scores_isolation_and_persistence_from_each_replys_decisions(tmp_path):
    from ifdistill.benchmarks.checking.schema import SAMPLE_SCHEMA, validate
    from ifdistill.evaluator.output import read_results
    from ifdistill.evaluator.run import evaluate

    out = tmp_path / "eval"
    evaluate(load_config([*BASE, "eval.data.max_examples=4", "eval.generation.max_new_tokens=8", "eval.backend=hf",
                          "eval.runtime.progress=false"], output_dir=str(out)))
    results, rows = read_results(out)
    validate(results)
    assert results["counts"]["persistence_conversations"] == len(rows) == 4 and results["counts"]["skipped_rows"] == 0
    for row in rows:
        validate(row, SAMPLE_SCHEMA)
        assert row["new_instruction_ids"] == row["instruction_id_list"][-1:]
        for mode in ("strict", "loose"):
            assert row["metrics"][f"isolation_{mode}_acc"] == float(row[f"{mode}_inst"][-1])
            assert row["metrics"][f"persistence_{mode}_acc"] == float(all(row[f"{mode}_inst"]))
    for name in ("isolation_strict_acc", "persistence_strict_acc", "isolation_loose_acc", "persistence_loose_acc"):
        assert results["metrics"][name] == sum(r["metrics"][name] for r in rows) / 4
    assert results["metrics"]["persistence_strict_acc"] == results["metrics"]["prompt_level_strict_acc"]
