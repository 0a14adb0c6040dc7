"""Prompt rendering: k-shot demos (deterministic, documented order, never the evaluated prompt), chat
templates (the tokenizer's, a configured one, none -> error), context checks, stop ids."""

from __future__ import annotations

import json
import shutil

import pytest

from ifdistill.data.records import Example
from ifdistill.data.render import render_prompt
from ifdistill.evaluator.errors import ChatTemplateError, PromptTooLongError
from ifdistill.evaluator.prompts import build_prompts, load_tokenizer, max_tokens_for, stop_token_ids
from ifdistill.evaluator.settings import FewShotSettings, GenerationSettings


def _eval_example(i: int, prompt: str | None = None) -> Example:
    return Example(messages=({"role": "user", "content": prompt or f"Write note {i} in lowercase."},),
                   source="evalset", row_id=str(i), key=str(1000 + i),
                   instruction_id_list=("change_case:english_lowercase",), kwargs=({},))


def _demo(i: int, prompt: str | None = None, key: str | None = None) -> Example:
    return Example(messages=({"role": "user", "content": prompt or f"Demo question {i}?"},
                             {"role": "assistant", "content": f"demo answer {i}"}),
                   source="pool", row_id=str(i), key=key)


@pytest.fixture()
def examples():
    return [_eval_example(i) for i in range(6)]


@pytest.fixture()
def pool(examples):
    # The pool holds the evaluated prompts too: once under the same key, once under another key with
    # identical text. Neither may ever be chosen as a demonstration of that prompt.
    same_key = [_demo(100 + i, prompt=ex.prompt, key=ex.key) for i, ex in enumerate(examples)]
    same_text = [_demo(200 + i, prompt=ex.prompt) for i, ex in enumerate(examples)]
    return [_demo(i) for i in range(10)] + same_key + same_text


def _render(tok, examples, pool, k, seed=0, **gen):
    return build_prompts(tok, examples, generation=GenerationSettings(**gen), fewshot=FewShotSettings(k=k, seed=seed),
                         pool=pool)


def test_k_shot_is_deterministic_and_never_includes_the_evaluated_prompt(tiny_tokenizer, examples, pool):
    first = _render(tiny_tokenizer, examples, pool, k=3)
    again = _render(tiny_tokenizer, examples, list(reversed(pool)), k=3)  # load order does not matter
    assert [p.token_ids for p in first] == [p.token_ids for p in again]
    assert [p.demo_uids for p in first] == [p.demo_uids for p in again]
    by_uid = {d.uid: d for d in pool}
    for p in first:
        assert len(p.demo_uids) == 3 and len(set(p.demo_uids)) == 3
        for uid in p.demo_uids:
            assert by_uid[uid].prompt != p.example.prompt and by_uid[uid].key != p.key
    assert len({p.demo_uids for p in first}) > 1  # demos differ between prompts
    # A prompt's demos do not depend on which other prompts are evaluated.
    alone = _render(tiny_tokenizer, examples[3:4], pool, k=3)
    assert alone[0].demo_uids == first[3].demo_uids and alone[0].token_ids == first[3].token_ids
    # Another seed, another choice.
    assert [p.demo_uids for p in _render(tiny_tokenizer, examples, pool, k=3, seed=1)] != [p.demo_uids for p in first]


def test_k_shot_layout_is_demo_turns_then_the_prompt(tiny_tokenizer, examples, pool):
    p = _render(tiny_tokenizer, examples[:1], pool, k=2, system_prompt="Be exact.")[0]
    by_uid = {d.uid: d for d in pool}
    demos = [by_uid[u] for u in p.demo_uids]
    expected = [{"role": "system", "content": "Be exact."}]
    for d in demos:
        expected += [{"role": "user", "content": d.prompt}, {"role": "assistant", "content": d.completion}]
    expected.append({"role": "user", "content": examples[0].prompt})
    assert list(p.messages) == expected
    assert list(p.token_ids) == render_prompt(tiny_tokenizer, expected)
    text = tiny_tokenizer.decode(list(p.token_ids))
    assert text.startswith("<|im_start|>system\nBe exact.<|im_end|>") and text.endswith("<|im_start|>assistant\n")


def test_zero_shot_renders_the_prompt_alone(tiny_tokenizer, examples):
    p = _render(tiny_tokenizer, examples[:1], None, k=0)[0]
    assert p.demo_uids == () and list(p.token_ids) == render_prompt(tiny_tokenizer, [examples[0].messages[0]])


def test_a_reference_answer_in_the_eval_row_is_not_part_of_the_prompt(tiny_tokenizer):
    with_answer = Example(messages=({"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}),
                          source="s", row_id="1", key="1", instruction_id_list=("punctuation:no_comma",), kwargs=({},))
    p = _render(tiny_tokenizer, [with_answer], None, k=0)[0]
    assert list(p.token_ids) == render_prompt(tiny_tokenizer, [{"role": "user", "content": "Say hi."}])


@pytest.fixture()
def no_template_dir(tiny_model_dir, tmp_path):
    out = tmp_path / "no_template"
    out.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_model_dir / name, out / name)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return out


def test_a_tokenizer_without_chat_template_is_an_error_unless_one_is_configured(no_template_dir, tmp_path):
    with pytest.raises(ChatTemplateError, match="no chat template"):
        load_tokenizer(str(no_template_dir), None)
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    tok, used = load_tokenizer(str(no_template_dir), template)
    assert used == template
    assert tok.decode(render_prompt(tok, [{"role": "user", "content": "hi"}])) == "[user] hi\n[assistant] "
    path = tmp_path / "t.jinja"
    path.write_text(template)
    assert load_tokenizer(str(no_template_dir), str(path))[1] == template
    with pytest.raises(ChatTemplateError, match="neither"):
        load_tokenizer(str(no_template_dir), str(tmp_path / "missing.jinja"))


def test_prompts_longer_than_the_context_are_an_error_and_budgets_are_capped(tiny_tokenizer, examples):
    prompts = _render(tiny_tokenizer, examples[:3], None, k=0)
    n = len(prompts[0].token_ids)
    assert max_tokens_for(prompts, 4096, 1280) == [1280] * 3
    assert max_tokens_for(prompts[:1], n + 10, 1280) == [10]
    with pytest.raises(PromptTooLongError, match=f"context of {n} tokens.*{prompts[0].key}.*{n} tokens"):
        max_tokens_for(prompts[:1], n, 1280)


def test_stop_ids_come_from_tokenizer_generation_config_and_settings(tiny_tokenizer, tiny_model_dir):
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert stop_token_ids(tiny_tokenizer, str(tiny_model_dir), []) == [eos]
    assert stop_token_ids(tiny_tokenizer, str(tiny_model_dir), [7, eos]) == sorted({7, eos})
