"""Accounting: the per-run data manifest and the per-step replay share.

Why: two runs that "used ratio 0.18" are comparable only if they trained on the same examples; a
difference of 8 IFEval prompts is within what an unnoticed change of data could cause. The manifest
(``data_manifest.json`` in the run directory) records, per source: its identity (sha256 of each
file, or the Hugging Face name/config/split/revision), rows read, rows filtered as unverified,
invalid rows skipped (by kind, with the first locations), render failures, examples dropped or cut
for length and why, and what training finally used -- examples, tokens and *supervised* tokens.
Plus the mixture (ratio, counts per replay source, realised share by examples and by supervised
tokens), the tokenizer and chat template identity, and the rendering options.

:func:`replay_share` gives the same two shares for one batch, for per-step logging: a ratio is
set in examples, but the loss is a sum over tokens, so the share of the *gradient signal* that comes
from replay is the token share.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ifdistill.paths import write_json_atomic

MANIFEST_NAME = "data_manifest.json"
MANIFEST_VERSION = 1


def tokenizer_identity(tokenizer) -> dict[str, Any]:
    """What determines rendering: tokenizer class/path, vocabulary size, special ids, template hash."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        template = json.dumps(dict(template), sort_keys=True)
    try:
        vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
        vocab_sha = hashlib.sha256(vocab.encode()).hexdigest()
    except Exception:  # tokenizers without get_vocab
        vocab_sha = None
    return {
        "class": type(tokenizer).__name__,
        "name_or_path": str(getattr(tokenizer, "name_or_path", "")),
        "vocab_size": len(tokenizer),
        "vocab_sha256": vocab_sha,
        "eos_token": getattr(tokenizer, "eos_token", None),
        "pad_token": getattr(tokenizer, "pad_token", None),
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest() if template else None,
    }


class DataManifest:
    """Collects the manifest while the dataset is built; :meth:`write` saves it."""

    def __init__(self, config: Mapping[str, Any]):
        self.data: dict[str, Any] = {"manifest_version": MANIFEST_VERSION, "config": dict(config),
                                     "tokenizer": None, "sources": {}, "mix": {}, "icl": None}

    def source(self, name: str, role: str) -> dict[str, Any]:
        return self.data["sources"].setdefault(name, {"role": role})

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value

    def record_usage(self, items: list[Mapping[str, Any]]) -> None:
        """Examples, tokens and supervised tokens per source over what training will see."""
        per: dict[str, dict[str, int]] = {}
        for it in items:
            s = per.setdefault(it["source"], {"examples": 0, "tokens": 0, "supervised_tokens": 0})
            s["examples"] += 1
            s["tokens"] += len(it["input_ids"])
            s["supervised_tokens"] += _supervised(it)
        for name, used in per.items():
            self.data["sources"].setdefault(name, {})["used"] = used
        rep = [it for it in items if it["is_replay"]]
        n_sup = sum(v["supervised_tokens"] for v in per.values())
        r_sup = sum(_supervised(it) for it in rep)
        self.data["mix"]["realised"] = {
            "examples": len(items), "replay_examples": len(rep),
            "replay_share_examples": len(rep) / len(items) if items else 0.0,
            "supervised_tokens": n_sup, "replay_supervised_tokens": r_sup,
            "replay_share_supervised_tokens": r_sup / n_sup if n_sup else 0.0,
        }

    def to_dict(self) -> dict[str, Any]:
        return self.data

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        if path.is_dir() or not path.suffix:
            path = path / MANIFEST_NAME
        return write_json_atomic(path, self.data, sort_keys=False)


def replay_share(batch: Mapping[str, Any]) -> dict[str, float]:
    """Share of replay in one batch, by examples and by supervised (label) tokens.

    Reads ``is_replay`` and ``num_supervised`` (per example), which every ifdistill collator emits.
    Sum the raw counts (``replay_*``/``total_*``) across ranks before dividing if you log globally.
    """
    is_rep = [bool(x) for x in _as_list(batch["is_replay"])]
    sup = [int(x) for x in _as_list(batch["num_supervised"])]
    rep_sup = sum(s for s, r in zip(sup, is_rep) if r)
    n, n_rep, total_sup = len(is_rep), sum(is_rep), sum(sup)
    return {
        "replay_share_examples": n_rep / n if n else 0.0,
        "replay_share_tokens": rep_sup / total_sup if total_sup else 0.0,
        "replay_examples": float(n_rep), "total_examples": float(n),
        "replay_supervised_tokens": float(rep_sup), "total_supervised_tokens": float(total_sup),
    }


def _supervised(item: Mapping[str, Any]) -> int:
    """Supervised tokens the loss sees (token 0 is never predicted, as in the collators)."""
    return int(np.asarray(item["loss_mask"][1:], dtype=np.int64).sum())


def _as_list(x: Any) -> list:
    return x.tolist() if hasattr(x, "tolist") else list(x)
