"""Loss masks under Qwen3's real chat template, checked against a construction from the template's own
output (never against the renderer).

For a conversation ending with the assistant turn to learn, the template itself gives

- ``P`` = ``apply_chat_template(messages[:-1], add_generation_prompt=True, enable_thinking=e)``: what the
  evaluator asks the model to continue;
- ``F`` = ``apply_chat_template(messages, enable_thinking=e)``: the training text.

The expected rendering is ``F`` cut as ``P | A | "\\n"`` where ``A`` ends with ``<|im_end|>``; its ids are
the three pieces tokenised on their own (the prompt exactly as generation tokenises it) and the mask
covers ``A``. ``A`` is also written out by hand from the template's documented behaviour (the final
turn always has a think block; the empty one belongs to the prompt when thinking is off), so a
template change that moved the boundary would fail here too. ``enable_thinking=None`` is checked as
the documented *False* (ifdistill's rule for thinking templates).
"""

from __future__ import annotations

import itertools

import pytest

from ifdistill.data.icl import with_demos
from ifdistill.data.records import Example
from ifdistill.data.render import RenderError, render, render_prompt

SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "Write a haiku about rivers, in lowercase."}
EARLIER = [{"role": "user", "content": "Name a colour."},
           {"role": "assistant", "content": "<think>\nthe sky\n</think>\n\nBlue."}]  # reasoning dropped later
DEMOS = [Example(messages=({"role": "user", "content": f"Demo prompt {i}?"},
                           {"role": "assistant", "content": f"Demo answer {i}."}), source="pool", row_id=str(i))
         for i in range(2)]
CONTEXTS = {
    "single": [USER],
    "system": [SYSTEM, USER],
    "multi_turn": [*EARLIER, USER],
    "system_multi_turn": [SYSTEM, *EARLIER, USER],
    "two_shot": with_demos([USER], DEMOS),
    "system_two_shot": with_demos([SYSTEM, USER], DEMOS),
}
ANSWER = "rivers bend and shine\ncold water over stones\nthe sea waits below"
REASONING = "Five, seven, five syllables."
FINALS = {
    "plain": {"role": "assistant", "content": ANSWER},
    "reasoning_content": {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING},
    "inline_think": {"role": "assistant", "content": f"<think>\n{REASONING}\n</think>\n\n{ANSWER}"},
}


def _by_hand(final: str, thinking: bool) -> str | None:
    """The supervised text Qwen3's template should produce, or None where it must be refused."""
    reasoning = "" if final == "plain" else REASONING
    if not thinking:
        return None if reasoning else f"{ANSWER}<|im_end|>"
    return f"<think>\n{reasoning}\n</think>\n\n{ANSWER}<|im_end|>"


@pytest.mark.parametrize("context,final,thinking", list(itertools.product(CONTEXTS, FINALS, (True, False, None))))
def test_mask_matches_the_templates_own_output(qwen3_tokenizer, context, final, thinking):
    tok = qwen3_tokenizer
    messages = CONTEXTS[context] + [FINALS[final]]
    effective = bool(thinking)  # None is False for a thinking template (ifdistill.data.render)
    train_on = "assistant" if context in ("single", "system") else "last_assistant"
    expected_answer = _by_hand(final, effective)
    if expected_answer is None:
        with pytest.raises(RenderError, match="generation prompt is not a prefix"):
            render(tok, messages, enable_thinking=thinking, train_on=train_on)
        return
    prompt = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True,
                                     enable_thinking=effective)
    full = tok.apply_chat_template(messages, tokenize=False, enable_thinking=effective)
    assert prompt.endswith("<|im_start|>assistant\n" + ("" if effective else "<think>\n\n</think>\n\n"))
    assert full.startswith(prompt) and full.endswith("<|im_end|>\n")
    answer = full[len(prompt):-1]
    assert answer == expected_answer
    pieces = [tok(p, add_special_tokens=False)["input_ids"] for p in (prompt, answer, "\n")]

    r = render(tok, messages, enable_thinking=thinking, train_on=train_on)
    assert r.input_ids == pieces[0] + pieces[1] + pieces[2]
    assert r.loss_mask == [0] * len(pieces[0]) + [1] * len(pieces[1]) + [0] * len(pieces[2])
    assert tok.decode(r.input_ids) == full  # the training text is the template's, byte for byte
    # the evaluator's prompt is a token prefix and the mask starts exactly where it ends
    assert render_prompt(tok, messages[:-1], enable_thinking=thinking) == r.input_ids[: r.prompt_len] == pieces[0]
    if effective and final != "plain":  # <think>/</think> are single added tokens inside the mask
        ids = tok.convert_tokens_to_ids(["<think>", "</think>"])
        assert all(t in r.input_ids[r.prompt_len:] for t in ids)


def test_per_turn_masks_are_refused_where_the_template_rewrites_turns(qwen3_tokenizer):
    """Qwen3 renders the final turn with a think block and earlier ones without: every-turn masks are
    refused (the earlier turn's tokens would differ from the text trained on), the final turn is fine."""
    messages = [USER, {"role": "assistant", "content": "a"}, USER, {"role": "assistant", "content": "b"}]
    with pytest.raises(RenderError, match="rewrites earlier turns"):
        render(qwen3_tokenizer, messages, enable_thinking=False)
    r = render(qwen3_tokenizer, messages, enable_thinking=False, train_on="last_assistant")
    assert qwen3_tokenizer.decode([t for t, m in zip(r.input_ids, r.loss_mask) if m]) == "b<|im_end|>"


def test_think_tokens_are_added_but_not_special(qwen3_tokenizer):
    """Why the evaluator must strip the think block itself: a skip_special_tokens decode keeps it."""
    tok = qwen3_tokenizer
    ids = tok("<think>\nx\n</think>\n\ny<|im_end|>", add_special_tokens=False)["input_ids"]
    assert ids[0] == tok.convert_tokens_to_ids("<think>")
    assert tok.decode(ids, skip_special_tokens=True) == "<think>\nx\n</think>\n\ny"
