"""Conversation -> (input_ids, loss_mask): the one place where ifdistill makes a loss mask.

Why a function of its own: a mask that is empty, or that covers the prompt, trains the wrong thing
and no error says so -- the most common silent failure of SFT code. Everything that tokenises a
conversation for training (SFT, the ICL teacher and student views) goes through :func:`render`, and
the evaluator builds its generation prompts with :func:`render_prompt`, so a prompt is tokenised the
same way in training and in evaluation.

How the mask is found, for any chat template (no ``{% generation %}`` markers needed): for each
assistant turn ``j`` to supervise, render ``messages[:j]`` with the generation prompt (what the model
sees before it starts writing) and ``messages[:j+1]``; the text between the two is what the model
must produce. It must start with the generation prompt's prefix, contain the assistant's content,
and end with an end-of-turn token (the tokenizer's EOS or a known end-of-turn marker such as
``<|im_end|>``); the supervised span is the content *and* that token (so the model learns to stop),
not the newline a template may print after it.

Refusals (:class:`RenderError`, never a silent wrong mask):

- the generation prompt is not a prefix of the rendered turn: the model would learn to answer after
  a prompt it never sees at evaluation time (Qwen3's template with ``enable_thinking=False`` and an
  assistant turn that carries reasoning: the prompt ends with an empty think block, the turn with a
  full one);
- the template *rewrites earlier turns* -- rendering a prefix of the conversation does not give a
  prefix of the full rendering (Qwen3's template drops ``<think>`` blocks of earlier assistant turns,
  for example). Then per-turn masks are not well defined; ``train_on="last_assistant"`` supervises
  only the final turn and needs only the final prefix to be stable.
- the template does not reproduce the assistant's content, or prints no end-of-turn token after it;
- nothing would be supervised.

Tokenisation is piecewise: the text is cut at the start and end of every supervised span and each
piece is tokenised on its own, then concatenated. The prompt piece is therefore tokenised exactly as
:func:`render_prompt` tokenises it for generation (a BPE merge across the prompt/answer boundary
would otherwise give training token ids the model never sees at inference), and the mask falls on
token boundaries by construction.

Qwen3-style templates (``enable_thinking`` in the template): ``enable_thinking=None`` means *False*
for such a template -- the same default as ifdistill's evaluator, so training and evaluation render
the same empty ``<think></think>`` block in the prompt. ``enable_thinking=True`` on a template
without a thinking mode is an error rather than a silently ignored flag. What is trained on with
Qwen3's template (its final assistant turn is always rendered with a think block):

- ``enable_thinking=False``: the prompt ends with ``<|im_start|>assistant\n<think>\n\n</think>\n\n``
  (exactly what the evaluator's generation prompt ends with) and the supervised span is the answer
  and ``<|im_end|>``; a final turn with reasoning is refused (see above);
- ``enable_thinking=True``: the prompt ends with ``<|im_start|>assistant\n`` and the supervised span
  is the whole think block (empty, or the turn's reasoning), the answer and ``<|im_end|>`` -- again
  exactly what the model must produce after the evaluator's prompt.

Either way the evaluator's prompt is a token prefix of the training sequence and the mask starts
where it ends (tested on every IFEval prompt and the synthetic data).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

TRAIN_ON = ("assistant", "last_assistant")
# End-of-turn markers of common templates; used only when the tokenizer knows them as tokens.
_KNOWN_EOT = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "</s>")


class RenderError(ValueError):
    """The conversation cannot be rendered with a correct loss mask with this tokenizer/template."""


@dataclasses.dataclass(frozen=True)
class Rendered:
    """Token ids and the loss mask (1 = supervised) of one conversation.

    ``spans`` are the supervised token ranges ``[start, end)``; ``prompt_len`` is the start of the
    last one (the tokens before it are the model's prompt for the final answer).
    """

    input_ids: list[int]
    loss_mask: list[int]
    spans: tuple[tuple[int, int], ...]

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def prompt_len(self) -> int:
        return self.spans[-1][0]

    @property
    def num_supervised(self) -> int:
        return sum(e - s for s, e in self.spans)


def template_text(value: str) -> str:
    """A chat template given as text or as a path to a ``.jinja`` file (``model.chat_template``,
    ``eval.generation.chat_template``): training and evaluation read it with this one rule. A Jinja
    template always contains ``{{`` or ``{%``; any other value is a path to one."""
    if "{{" in value or "{%" in value:
        return value
    path = os.path.expanduser(value)
    if not os.path.isfile(path):
        raise RenderError(f"chat template {value!r} is neither a Jinja template nor an existing file")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _template(tokenizer) -> str:
    t = getattr(tokenizer, "chat_template", None)
    if isinstance(t, Mapping):
        t = t.get("default")
    if not t:
        raise RenderError(f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; "
                          "set one (model.chat_template) before rendering")
    return t


def thinking_kwargs(tokenizer, enable_thinking: bool | None) -> dict[str, Any]:
    """Template kwargs for ``enable_thinking`` (see the module docstring for the rule)."""
    if "enable_thinking" in _template(tokenizer):
        return {"enable_thinking": bool(enable_thinking) if enable_thinking is not None else False}
    if enable_thinking:
        raise RenderError("enable_thinking=True but the chat template has no thinking mode "
                          "(it never reads 'enable_thinking')")
    return {}


def _apply(tokenizer, messages: Sequence[Mapping[str, str]], gen: bool, extra: dict[str, Any]) -> str:
    try:
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=gen, **extra)
    except Exception as e:  # Jinja errors (raise_exception in templates, undefined variables, ...)
        raise RenderError(f"the chat template failed on this conversation: {type(e).__name__}: {e}") from None
    if not isinstance(text, str):
        raise RenderError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not str")
    return text


def _eot_strings(tokenizer) -> list[str]:
    known = set(getattr(tokenizer, "all_special_tokens", []) or [])
    try:
        known |= set(tokenizer.get_added_vocab())
    except Exception:  # slow tokenizers without added vocab
        pass
    out = [tokenizer.eos_token] if getattr(tokenizer, "eos_token", None) else []
    out += [t for t in _KNOWN_EOT if t in known and t not in out]
    return out


def _check_messages(messages: Sequence[Any]) -> None:
    """Cheap structural check so that a bad row never reaches Jinja or the tokenizer."""
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise RenderError("messages must be a non-empty list of {'role', 'content'} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise RenderError(f"messages[{i}] must be a dict with str 'role' and 'content', got {m!r:.80}")


def _supervised_chars(tokenizer, messages, train_on: str, extra) -> tuple[str, list[tuple[int, int]]]:
    """The full text and the character spans to supervise."""
    n = len(messages)
    full = _apply(tokenizer, messages, False, extra)
    turns = [j for j, m in enumerate(messages) if m["role"] == "assistant"]
    if train_on == "last_assistant":
        turns = turns[-1:] if turns and turns[-1] == n - 1 else []
    if not turns:
        raise RenderError(f"nothing to supervise: no assistant turn to train on (train_on={train_on!r})")
    eots = _eot_strings(tokenizer)
    spans: list[tuple[int, int]] = []
    for j in turns:
        if j == 0:
            raise RenderError("an assistant turn opens the conversation; there is no prompt to condition on")
        prefix = _apply(tokenizer, messages[:j], True, extra)
        upto = full if j == n - 1 else _apply(tokenizer, messages[: j + 1], False, extra)
        if full.startswith(upto) and not upto.startswith(prefix):
            raise RenderError(
                f"the generation prompt is not a prefix of assistant message {j} as the template renders "
                f"it (template kwargs {extra}): the model would be trained after a prompt it is never "
                "given at evaluation time. With a Qwen3-style template and enable_thinking=False this "
                "means the turn carries reasoning (reasoning_content or inline <think> text) while the "
                "prompt ends with an empty think block: drop the reasoning or set enable_thinking=True.")
        if not full.startswith(upto):
            raise RenderError(
                f"the chat template rewrites earlier turns: rendering the conversation up to message {j} "
                "is not a prefix of rendering all of it, so a per-turn loss mask would not match the "
                "training text. Use train_on='last_assistant' (supervise only the final turn) or a "
                "template that renders each turn independently.")
        diff = upto[len(prefix):]
        content = messages[j]["content"].split("</think>")[-1].strip()
        at = diff.find(content) if content else 0
        if at < 0:
            raise RenderError(f"the chat template does not reproduce the content of assistant message {j} "
                              "between the generation prompt and the end of the turn")
        after = at + len(content)
        hits = [(diff.find(t, after), t) for t in eots if diff.find(t, after) >= 0]
        if not hits:
            raise RenderError(f"no end-of-turn token ({', '.join(eots) or 'tokenizer has no eos_token'}) "
                              f"after assistant message {j}; the model would never learn to stop")
        pos, tok = min(hits)
        start, end = len(prefix), len(prefix) + pos + len(tok)
        if spans and start < spans[-1][1]:
            raise RenderError("supervised spans overlap; the template's turn boundaries are inconsistent")
        spans.append((start, end))
    return full, spans


def _encode(tokenizer, pieces: list[str]) -> list[list[int]]:
    try:
        return list(tokenizer(pieces, add_special_tokens=False)["input_ids"])
    except Exception as e:
        raise RenderError(f"tokenisation failed: {type(e).__name__}: {e}") from None


def render(tokenizer, messages: Sequence[Mapping[str, str]], *, enable_thinking: bool | None = None,
           train_on: str = "assistant") -> Rendered:
    """Tokenise a conversation with its chat template and mark the tokens to learn.

    ``train_on="assistant"`` supervises every assistant turn, ``"last_assistant"`` only the final one
    (the conversation must then end with an assistant turn). Raises :class:`RenderError` instead of
    ever returning an empty mask or a mask on text the template rewrote.
    """
    if train_on not in TRAIN_ON:
        raise ValueError(f"train_on must be one of {TRAIN_ON}, got {train_on!r}")
    _check_messages(messages)
    extra = thinking_kwargs(tokenizer, enable_thinking)
    full, spans = _supervised_chars(tokenizer, messages, train_on, extra)
    cuts = [0] + [c for s in spans for c in s] + [len(full)]
    pieces = [full[a:b] for a, b in zip(cuts[:-1], cuts[1:])]
    encoded = _encode(tokenizer, pieces)
    ids: list[int] = []
    mask: list[int] = []
    tok_spans = []
    for i, piece_ids in enumerate(encoded):
        supervised = i % 2 == 1  # pieces alternate: unsupervised, supervised, unsupervised, ...
        if supervised:
            if not piece_ids:
                raise RenderError("a supervised span tokenised to nothing")
            tok_spans.append((len(ids), len(ids) + len(piece_ids)))
        ids += piece_ids
        mask += [int(supervised)] * len(piece_ids)
    if not tok_spans or tok_spans[0][0] == 0:
        raise RenderError("the loss mask would start at the first token: nothing conditions the answer")
    return Rendered(input_ids=ids, loss_mask=mask, spans=tuple(tok_spans))


def render_prompt(tokenizer, messages: Sequence[Mapping[str, str]], *,
                  enable_thinking: bool | None = None) -> list[int]:
    """Token ids of the generation prompt (``add_generation_prompt=True``) for a conversation that
    ends with a user turn -- identical to the prompt tokens :func:`render` trains on."""
    _check_messages(messages)
    if messages[-1]["role"] == "assistant":
        raise RenderError("render_prompt expects a conversation that ends with a user (or system) turn")
    extra = thinking_kwargs(tokenizer, enable_thinking)
    return _encode(tokenizer, [_apply(tokenizer, messages, True, extra)])[0]
