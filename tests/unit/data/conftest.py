"""Fixtures for the data tests: the tiny model's tokenizer under several chat templates.

The tiny tokenizer (byte-level BPE, ``<|im_start|>``/``<|im_end|>``/``<|endoftext|>``) is loaded afresh
for each template so no test changes the session's shared tokenizer.
"""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

# Llama-2 style: no assistant header, the generation prompt adds nothing, EOS closes the answer.
INST_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}{{- '<<SYS>>' + m['content'] + '<</SYS>>' -}}"
    "{%- elif m['role'] == 'user' -%}{{- '[INST] ' + m['content'] + ' [/INST]' -}}"
    "{%- else -%}{{- ' ' + m['content'] + eos_token -}}{%- endif -%}"
    "{%- endfor -%}"
)

# ChatML with {% generation %} markers: lets the test compare with transformers' own assistant mask.
CHATML_GENERATION = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}{% generation %}{{- m['content'] + '<|im_end|>' -}}{% endgeneration %}"
    "{{- '\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# The thinking rules of Qwen3's template: the final assistant turn (after the last user message) gets a
# <think> block, earlier ones do not -- so the template rewrites a turn once a later user turn exists.
QWEN3_LIKE = (
    "{%- set ns = namespace(last_query=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_query = loop.index0 -%}{%- endif -%}"
    "{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{%- if loop.index0 > ns.last_query -%}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + m['content'] + '<|im_end|>\\n' -}}"
    "{%- else -%}{{- '<|im_start|>assistant\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}{%- endif -%}"
)

# Replaces the content of every assistant turn except the last one: earlier turns are rewritten.
REWRITING = (
    "{%- for m in messages -%}"
    "{%- set c = m['content'] if (m['role'] != 'assistant' or loop.last) else '[earlier answer]' -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + c + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Never prints assistant turns: nothing could be supervised.
DROPS_ASSISTANT = (
    "{%- for m in messages -%}{%- if m['role'] != 'assistant' -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endif -%}{%- endfor -%}"
)

# Prints the answer but no end-of-turn token: the model would never learn to stop.
NO_EOT = (
    "{%- for m in messages -%}{{- m['role'] + ': ' + m['content'] + '\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'assistant: ' -}}{%- endif -%}"
)


@pytest.fixture(scope="session")
def make_tokenizer(tiny_model_dir):
    """``make_tokenizer(template=None)``: a fresh tiny tokenizer, optionally with another template."""

    def make(template: str | None = None):
        tok = AutoTokenizer.from_pretrained(tiny_model_dir)
        if template is not None:
            tok.chat_template = template
        return tok

    return make


@pytest.fixture(scope="session")
def tok(make_tokenizer):
    return make_tokenizer()
