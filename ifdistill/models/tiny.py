"""The embedded default model (``model=tiny``): a small random-init Qwen2 causal LM built locally.

Tests, CI and the demo cannot download weights, so the model is *built* from a seed: a byte-level BPE
tokenizer trained with ``tokenizers`` on a deterministic corpus, a ChatML chat template (the layout
Qwen uses, so rendering and loss masks go through the same code path as for real models), and a
Qwen2 architecture with random weights (:class:`ifdistill.models.random_init.ArchSpec`'s defaults).

The build is deterministic (same spec and seed -> byte-identical files) and cached under
``ifdistill.paths.cache_dir()/models/tiny-<hash of spec and builder version>``; the weights are never
committed. Loadable by transformers, PEFT and vLLM (CPU or GPU) like any HF directory.
"""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

from ifdistill.models.random_init import ArchSpec, cached_build, save_random_causal_lm, spec_key, write_marker

BUILDER_VERSION = 1
MARKER = "ifdistill_tiny.json"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PAD, IM_START, IM_END = SPECIAL_TOKENS

# ChatML as Qwen2.5/Qwen3 render it (without a default system prompt). No {% generation %} markers:
# ifdistill.data.render finds assistant tokens by rendering prefixes, which works for any template.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


@dataclasses.dataclass(frozen=True)
class TinySpec(ArchSpec):
    """Everything that determines the built files (the architecture's defaults are this model's);
    its hash names the cache entry."""

    corpus_sentences: int = 20000

    def key(self) -> str:
        return spec_key(self, BUILDER_VERSION)


_WORDS = (
    "the a an and or but if then when while because so that this these those it its they them their "
    "we you your he she his her i me my our us is are was were be been being have has had do does did "
    "will would can could should may might must not no yes all any each every some many few more most "
    "write answer response respond story poem essay letter email list summary title section paragraph "
    "sentence word words letter letters bullet point points json format lowercase uppercase capital "
    "quotation quote end phrase postscript note highlight markdown placeholder address name city "
    "about for from with without into over under between after before during of in on at to by as "
    "time day year people world life work school family friend music food water travel history "
    "science nature city country book movie game team company market health weather ocean river "
    "mountain forest garden computer program language model data question reason idea plan problem "
    "good great small large new old first last long short best better important different simple "
    "make take give tell explain describe include use keep follow help need want like know think "
    "one two three four five six seven eight nine ten hundred thousand please thanks hello dear "
    "is there any other question let me know"
).split()
_PUNCT = [".", ",", "!", "?", ":", ";", "-", "*", "**", "***", "\"", "'", "(", ")", "[", "]",
          "<<", ">>", "{", "}", "#", "P.S.", "P.P.S", "SECTION", "Section", "```json", "```", "\n", "\n\n"]


def _corpus(spec: TinySpec) -> list[str]:
    """Deterministic pseudo-English lines: enough to learn frequent words, markup and digits."""
    rng = random.Random(spec.seed)
    lines = []
    for _ in range(spec.corpus_sentences):
        n = rng.randint(3, 16)
        words = [rng.choice(_WORDS) for _ in range(n)]
        if rng.random() < 0.5:
            words[0] = words[0].capitalize()
        if rng.random() < 0.2:
            words = [w.upper() for w in words]
        if rng.random() < 0.3:
            words.insert(rng.randrange(n), rng.choice(_PUNCT))
        if rng.random() < 0.2:
            words.insert(rng.randrange(n), str(rng.randint(0, 2030)))
        lines.append(" ".join(words) + rng.choice([".", "!", "?", ":", ""]))
    return lines


def build_tokenizer(spec: TinySpec):
    """Train the byte-level BPE tokenizer and wrap it as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(spec), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        unk_token=None,
        bos_token=None,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=spec.max_position_embeddings,
        padding_side="right",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(out_dir: str | os.PathLike, spec: TinySpec = TinySpec()) -> Path:
    """Build tokenizer + random-init Qwen2 into ``out_dir`` (HF format, fp32 safetensors)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(spec)
    vocab = -(-len(tokenizer) // 64) * 64  # rounded up: embedding rows for every token id
    save_random_causal_lm(out, Qwen2Config, Qwen2ForCausalLM, spec, vocab_size=vocab,
                          eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
                          pad_token_id=tokenizer.convert_tokens_to_ids(PAD))
    tokenizer.save_pretrained(out)
    write_marker(out, MARKER, spec, BUILDER_VERSION)
    return out


def tiny_model_path(spec: TinySpec = TinySpec(), root: str | os.PathLike | None = None) -> Path:
    """The cached tiny model directory, built on first use (atomically, once across processes)."""
    return cached_build("tiny", spec.key(), MARKER, lambda tmp: build_tiny_model(tmp, spec), root)
