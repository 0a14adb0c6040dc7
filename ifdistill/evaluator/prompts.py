"""Prompts as token ids, rendered by ifdistill (never by a backend), so vLLM and HF see the same ids.

Rendering of one evaluated example (``k`` = ``eval.fewshot.k``):

1. ``[system_prompt]`` if configured, then the ``k`` demonstrations as earlier turns
   ``user: <demo prompt>`` / ``assistant: <demo answer>``, then the example's own user turn(s)
   (:func:`ifdistill.data.icl.with_demos`);
2. token ids of that conversation with the generation prompt, through
   :func:`ifdistill.data.render.render_prompt` -- the function training uses for its prompts --
   with the configured ``enable_thinking`` (``None`` = off for Qwen3-style templates).

Demonstrations (:class:`ifdistill.data.icl.DemoSelector`, the rule training uses too): the pool is
sorted by uid and permuted once with ``fewshot.seed``; each example starts at an offset derived from
``sha256(seed, key)`` and takes the next ``k`` demos, skipping any with the example's key/uid or with
its exact prompt text. So the choice is deterministic, independent of load order and of the other
examples, differs between examples, and never includes the evaluated prompt (checked again here).

The chat template is the tokenizer's unless ``generation.chat_template`` sets one (a template string
or a ``.jinja`` file); a tokenizer without template and no configured one is an error, because a
prompt without the model's chat format measures something else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ifdistill.data.icl import DemoSelector, with_demos
from ifdistill.data.records import Example
from ifdistill.data.render import RenderError, render_prompt, template_text
from ifdistill.evaluator.dataset import row_key
from ifdistill.evaluator.errors import ChatTemplateError, EvaluatorError, PromptTooLongError
from ifdistill.evaluator.settings import FewShotSettings, GenerationSettings


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One evaluated example, rendered."""

    key: str
    example: Example
    messages: tuple[dict[str, str], ...]
    demo_uids: tuple[str, ...]
    token_ids: tuple[int, ...]


def load_tokenizer(tokenizer_dir: str, chat_template: str | None):
    """The tokenizer with its effective chat template set; returns ``(tokenizer, template)``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if chat_template:
        try:
            tokenizer.chat_template = template_text(chat_template)
        except RenderError as err:
            raise ChatTemplateError(str(err)) from None
    template = tokenizer.chat_template
    if isinstance(template, Mapping):
        template = template.get("default")
        tokenizer.chat_template = template
    if not template:
        raise ChatTemplateError(
            f"the tokenizer in {tokenizer_dir} has no chat template; set eval.generation.chat_template "
            "(or model.chat_template) to a template string or a .jinja file")
    return tokenizer, template


def stop_token_ids(tokenizer, model_dir: str, extra: Sequence[int]) -> list[int]:
    """EOS ids that end a response: the tokenizer's, generation_config.json's, and configured ones.

    Both backends get this explicit list (vLLM is started with ``generation_config="vllm"`` so it
    adds nothing of its own), so they stop at the same tokens.
    """
    ids: set[int] = set(int(i) for i in extra)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    gen_cfg = Path(model_dir) / "generation_config.json"
    if gen_cfg.is_file():
        import json

        eos = json.loads(gen_cfg.read_text()).get("eos_token_id")
        ids.update(int(i) for i in (eos if isinstance(eos, list) else [eos] if eos is not None else []))
    if not ids:
        raise EvaluatorError("no stop token: the tokenizer has no eos_token and none is configured "
                             "(eval.generation.stop_token_ids)")
    return sorted(ids)


def _own_turns(ex: Example) -> list[dict[str, str]]:
    msgs = ex.to_messages()
    while msgs and msgs[-1]["role"] == "assistant":  # a reference answer is not part of the prompt
        msgs.pop()
    return msgs


def build_prompts(tokenizer, examples: Sequence[Example], *, generation: GenerationSettings,
                  fewshot: FewShotSettings, pool: Sequence[Example] | None) -> list[Prompt]:
    """Render every example (with its k demonstrations) to generation-prompt token ids."""
    selector = DemoSelector(pool, seed=fewshot.seed) if fewshot.k > 0 else None
    out: list[Prompt] = []
    for ex in examples:
        key = row_key(ex)
        demos: list[Example] = []
        if selector is not None:
            demos = selector.select(fewshot.k, exclude_key=key, exclude_prompt=ex.prompt)
            if any(d.prompt.strip() == ex.prompt.strip() or key in (d.uid, d.key) for d in demos):
                raise EvaluatorError(f"demo selection returned the evaluated prompt {key!r} as a demonstration")
        messages = _own_turns(ex)
        if generation.system_prompt:
            messages = [{"role": "system", "content": generation.system_prompt}] + messages
        messages = with_demos(messages, demos)
        try:
            ids = render_prompt(tokenizer, messages, enable_thinking=generation.enable_thinking)
        except RenderError as err:
            raise EvaluatorError(f"cannot render prompt {key!r}: {err}") from None
        out.append(Prompt(key=key, example=ex, messages=tuple(messages),
                          demo_uids=tuple(d.uid for d in demos), token_ids=tuple(ids)))
    return out


def max_tokens_for(prompts: Sequence[Prompt], context_len: int, max_new_tokens: int) -> list[int]:
    """Per prompt: ``min(max_new_tokens, context - prompt length)``; a prompt that leaves no room is
    an error naming the longest offender (the prompt is never truncated)."""
    too_long = [p for p in prompts if len(p.token_ids) >= context_len]
    if too_long:
        worst = max(too_long, key=lambda p: len(p.token_ids))
        raise PromptTooLongError(
            f"{len(too_long)} prompt(s) do not fit the model's context of {context_len} tokens; the longest, "
            f"{worst.key!r}, has {len(worst.token_ids)} tokens. Use a model with a longer context, "
            "fewer demonstrations (eval.fewshot.k) or a larger eval.max_model_len if the model allows it.")
    return [min(max_new_tokens, context_len - len(p.token_ids)) for p in prompts]


def demo_selection(prompts: Sequence[Prompt]) -> list[Any]:
    """The chosen demos per prompt, for the config hash (``[key, [uids]]`` rows)."""
    return [[p.key, list(p.demo_uids)] for p in prompts]
