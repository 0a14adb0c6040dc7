"""The size of vLLM-CPU's KV cache when ``eval.runtime.kv_cache_memory_bytes`` is null: sized from the
model and the evaluation instead of a fixed number.

Why: a fixed size fits one model. 256 MiB is room for ~65,000 tokens of the 4-layer tiny model but
only ~5,800 of SmolLM2-135M (30 layers, 3 KV heads of 64, float32: 45 KiB per token), where it
starves batching: a batch of 48 prompts at 256 new tokens needs ~17,000 tokens at once. The automatic
size holds every sequence vLLM can batch at once, each at its full length:

    bytes = per_token * (max(sum of the longest max_num_seqs (prompt + max_new_tokens + BLOCK), max_model_len)
                         + BLOCK)

with ``per_token = 2 (K and V) * layers * KV heads * head_dim * dtype bytes`` from the model's
config.json, a block of slack per sequence (its last block is partly filled) and one for the cache's
null block (:data:`BLOCK_TOKENS`, vLLM-CPU's block size), at least one sequence of the engine's full
context (vLLM refuses a cache that cannot hold one), and at most :data:`MEMORY_FRACTION` of the machine's memory (then vLLM batches fewer sequences
at once; the outputs do not depend on it). The size is a runtime setting: it is outside
``eval_config_hash``, and the same evaluation (same prompts, same model) always gets the same size, so
an in-training and a post-training evaluation of one checkpoint batch alike.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Sequence

#: The automatic size never exceeds this share of the machine's physical memory.
MEMORY_FRACTION = 0.25
#: vLLM's ``max_num_seqs`` when the runtime sets none (vLLM's default for its LLM class on CPU).
DEFAULT_MAX_NUM_SEQS = 256
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "auto": 4}
MIB = 1 << 20
#: Tokens per KV block on vLLM-CPU (its largest block size): the slack per sequence and the null block.
BLOCK_TOKENS = 128


def kv_bytes_per_token(model_dir: str | os.PathLike, dtype: str) -> int:
    """KV-cache bytes one token takes in every layer (keys and values) for the model in ``model_dir``."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)
    heads = int(cfg["num_attention_heads"])
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // heads)
    return 2 * int(cfg["num_hidden_layers"]) * kv_heads * head_dim * DTYPE_BYTES.get(str(dtype), 4)


def physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def auto_kv_cache_bytes(model_dir: str | os.PathLike, dtype: str, *, max_model_len: int,
                        sequence_tokens: Sequence[int] = (), max_num_seqs: Optional[int] = None,
                        memory: Optional[int] = None) -> int:
    """The KV-cache size in bytes (a whole number of MiB) for sequences of ``sequence_tokens`` tokens each
    (prompt + new-token budget; none known: one full-context sequence), see the module docstring."""
    per_token = kv_bytes_per_token(model_dir, dtype)
    longest = sorted(sequence_tokens, reverse=True)[: max_num_seqs or DEFAULT_MAX_NUM_SEQS]
    tokens = max(sum(n + BLOCK_TOKENS for n in longest), max_model_len) + BLOCK_TOKENS
    floor = per_token * (max_model_len + BLOCK_TOKENS)
    cap = max(floor, int(MEMORY_FRACTION * (memory if memory is not None else physical_memory())))
    wanted = min(per_token * tokens, cap)
    return -(-wanted // MIB) * MIB
