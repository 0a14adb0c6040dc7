"""Loss masks from chat templates: right on ChatML and templates without generation markers, refusals."""

from __future__ import annotations

import pytest

from ifdistill.data.render import RenderError, render, render_prompt
from tests.unit.data.conftest import (
    CHATML_GENERATION,
    DROPS_ASSISTANT,
    INST_TEMPLATE,
    NO_EOT,
    QWEN3_LIKE,
    REWRITING,
)

ONE_TURN = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."},
            {"role": "assistant", "content": "Hello, world!"}]
TWO_TURNS = ONE_TURN + [{"role": "user", "content": "Again, in lowercase."},
                        {"role": "assistant", "content": "hello again."}]


def supervised_text(tok, r) -> str:
    return tok.decode([t for t, m in zip(r.input_ids, r.loss_mask) if m])


def spans_text(tok, r) -> list[str]:
    return [tok.decode(r.input_ids[s:e]) for s, e in r.spans]


def test_chatml_single_turn_mask_is_answer_and_end_token(tok):
    r = render(tok, ONE_TURN)
    assert spans_text(tok, r) == ["Hello, world!<|im_end|>"]
    assert len(r.input_ids) == len(r.loss_mask)
    # Everything before the answer is the generation prompt, tokenised exactly as for inference.
    assert r.input_ids[: r.prompt_len] == render_prompt(tok, ONE_TURN[:-1])
    assert tok.decode(r.input_ids[: r.prompt_len]).endswith("<|im_start|>assistant\n")
    # The newline the template prints after <|im_end|> is not supervised.
    assert r.loss_mask[-1] == 0 and tok.decode(r.input_ids[-1:]) == "\n"


def test_chatml_multi_turn_masks_every_assistant_turn(tok):
    r = render(tok, TWO_TURNS)
    assert spans_text(tok, r) == ["Hello, world!<|im_end|>", "hello again.<|im_end|>"]
    assert supervised_text(tok, r) == "Hello, world!<|im_end|>hello again.<|im_end|>"
    last = render(tok, TWO_TURNS, train_on="last_assistant")
    assert spans_text(tok, last) == ["hello again.<|im_end|>"]
    assert last.input_ids == r.input_ids  # the mask changes, never the tokens
    assert r.input_ids[: r.prompt_len] == render_prompt(tok, TWO_TURNS[:-1])


def test_mask_equals_transformers_generation_marker_mask(make_tokenizer):
    """Where a template has {% generation %} markers, ifdistill's diff-based mask equals transformers' own."""
    tok = make_tokenizer(CHATML_GENERATION)
    for conv in (ONE_TURN, TWO_TURNS):
        ours = render(tok, conv)
        ref = tok.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        assert ours.input_ids == list(ref["input_ids"])
        assert ours.loss_mask == list(ref["assistant_masks"])


def test_template_without_generation_prompt_or_header(make_tokenizer):
    """[INST] style: add_generation_prompt changes nothing and there is no assistant header."""
    tok = make_tokenizer(INST_TEMPLATE)
    r = render(tok, TWO_TURNS)
    assert spans_text(tok, r) == [" Hello, world!<|im_end|>", " hello again.<|im_end|>"]
    assert tok.decode(r.input_ids[: r.spans[0][0]]).endswith("[INST] Say hi. [/INST]")
    assert r.input_ids[: r.prompt_len] == render_prompt(tok, TWO_TURNS[:-1])


def test_qwen3_thinking_off_by_default(make_tokenizer):
    tok = make_tokenizer(QWEN3_LIKE)
    r = render(tok, ONE_TURN)  # enable_thinking=None means False for a thinking template
    assert spans_text(tok, r) == ["Hello, world!<|im_end|>"]
    prompt = render_prompt(tok, ONE_TURN[:-1])
    assert tok.decode(prompt).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert r.input_ids[: r.prompt_len] == prompt
    assert render(tok, ONE_TURN, enable_thinking=False).input_ids == r.input_ids


def test_qwen3_thinking_on_supervises_the_think_block(make_tokenizer):
    tok = make_tokenizer(QWEN3_LIKE)
    r = render(tok, ONE_TURN, enable_thinking=True)
    assert spans_text(tok, r) == ["<think>\n\n</think>\n\nHello, world!<|im_end|>"]
    assert tok.decode(render_prompt(tok, ONE_TURN[:-1], enable_thinking=True)).endswith("<|im_start|>assistant\n")


def test_qwen3_multi_turn_is_refused_unless_last_assistant(make_tokenizer):
    tok = make_tokenizer(QWEN3_LIKE)
    with pytest.raises(RenderError, match="rewrites earlier turns"):
        render(tok, TWO_TURNS)
    r = render(tok, TWO_TURNS, train_on="last_assistant")
    assert spans_text(tok, r) == ["hello again.<|im_end|>"]


def test_rewriting_template_is_refused(make_tokenizer):
    tok = make_tokenizer(REWRITING)
    with pytest.raises(RenderError, match="rewrites earlier turns"):
        render(tok, TWO_TURNS)
    assert supervised_text(tok, render(tok, ONE_TURN)) == "Hello, world!<|im_end|>"


def test_enable_thinking_true_needs_a_thinking_template(tok):
    with pytest.raises(RenderError, match="no thinking mode"):
        render(tok, ONE_TURN, enable_thinking=True)
    assert render(tok, ONE_TURN, enable_thinking=False).input_ids == render(tok, ONE_TURN).input_ids


@pytest.mark.parametrize(
    ("template", "messages", "match"),
    [
        (None, ONE_TURN[:-1], "nothing to supervise"),
        (DROPS_ASSISTANT, ONE_TURN, "does not reproduce the content|rewrites"),
        (NO_EOT, ONE_TURN, "no end-of-turn token"),
        ("{{ raise_exception('no system role') }}", ONE_TURN, "chat template failed"),
    ],
    ids=["no-assistant-turn", "template-drops-assistant", "no-end-of-turn", "template-raises"],
)
def test_refusals(make_tokenizer, template, messages, match):
    tok = make_tokenizer(template)
    with pytest.raises(RenderError, match=match):
        render(tok, messages)


def test_bad_messages_and_missing_template(make_tokenizer):
    tok = make_tokenizer()
    with pytest.raises(RenderError, match="messages"):
        render(tok, [{"role": "user", "content": 5}, {"role": "assistant", "content": "x"}])
    with pytest.raises(RenderError, match="messages"):
        render(tok, "hello")
    with pytest.raises(RenderError, match="ends with a user"):
        render_prompt(tok, ONE_TURN)
    with pytest.raises(ValueError, match="train_on"):
        render(tok, ONE_TURN, train_on="everything")
    tok.chat_template = None
    with pytest.raises(RenderError, match="no chat template"):
        render(tok, ONE_TURN)


def test_answer_starting_with_newline_is_tokenised_as_generated(tok):
    """Piecewise tokenisation: the prompt tokens never merge with the answer's first characters."""
    conv = [{"role": "user", "content": "List."}, {"role": "assistant", "content": "\n\n* a\n* b"}]
    r = render(tok, conv)
    assert r.input_ids[: r.prompt_len] == render_prompt(tok, conv[:-1])
    assert spans_text(tok, r) == ["\n\n* a\n* b<|im_end|>"]
