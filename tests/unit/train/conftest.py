"""Small real batches for the training tests: the tiny model's tokenizer on a slice of the synthetic data."""

from __future__ import annotations

import pytest
import torch

TINY = {"name_or_path": "builtin:tiny"}
LORA = {"method": "lora", "r": 4, "alpha": 8, "dropout": 0.0}


def synthetic_data(n: int = 24, **extra) -> dict:
    return {"sources": [{"name": "syn", "synthetic": "train", "max_examples": n}], "heldout": 0,
            "max_length": 384, **extra}


def resolved(data: dict, *, k: int | None = None, demos: str = "shared", model: dict = TINY):
    """The data section resolved as training resolves it (``k=None``: an SFT method)."""
    from ifdistill.data.build import DataConfig

    method = None if k is None else {"k": k, "demos": demos}
    return DataConfig.resolve(data, icl=method, model=model)


@pytest.fixture(scope="session")
def icl_items(tiny_tokenizer):
    """Four examples rendered with a 2-shot teacher view (student view = plain SFT item)."""
    from ifdistill.data.build import build_train_dataset

    built = build_train_dataset(resolved(synthetic_data(24), k=2, demos="per_example"), tiny_tokenizer)
    return built.train.items[:4]


def k0_items(items):
    """The same examples with a teacher view that *is* the student view (k = 0)."""
    from ifdistill.data.icl import identity_teacher_view

    return [identity_teacher_view(dict(it)) for it in items]


def perturb_lora(module, seed: int = 0, std: float = 0.05) -> None:
    """LoRA B starts at 0 (adapter = identity); give it values so the adapter changes the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.lm.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * std)
