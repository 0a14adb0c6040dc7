"""Test-wide set-up: offline environment, punkt_tab before nltk, the tiny model, and CI rules.

Real-component tests (vLLM-CPU, multi-process, SLURM) are marked ``slow``/``slurm`` so a developer can
run the fast set alone (``make test-fast``). In CI (``CI=true``) a missing component is a failure,
never a silent skip: use :func:`tests.support.require` instead of ``pytest.skip`` for such prerequisites.
"""

from __future__ import annotations

import os

# Before anything imports nltk, transformers or wandb.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.pop("WANDB_API_KEY", None)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from ifdistill.paths import ensure_nltk_data  # noqa: E402

ensure_nltk_data()

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir():
    """The embedded tiny model (built once, cached under $IFDISTILL_CACHE or ~/.cache/ifdistill)."""
    from ifdistill.models.tiny import tiny_model_path

    return tiny_model_path()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_qwen3_dir():
    """The embedded tiny Qwen3 (real Qwen3 tokenizer and template; built once, cached like tiny)."""
    from ifdistill.models.tiny_qwen3 import tiny_qwen3_path

    return tiny_qwen3_path()


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    """Qwen3's real tokenizer and chat template from the shared data folder (no model needed)."""
    from transformers import AutoTokenizer

    from ifdistill.models.tiny_qwen3 import qwen3_tokenizer_dir

    return AutoTokenizer.from_pretrained(qwen3_tokenizer_dir())
