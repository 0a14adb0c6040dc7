"""Fixtures of the evaluator's real-component tests: the fine-tuned tiny model and its adapter."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tuned(tiny_model_dir):
    """``{"ft", "adapter", "merged", "words"}``: see tests/integration/evaluator/tuned.py (cached build)."""
    from tests.integration.evaluator.tuned import tuned_models

    return tuned_models(tiny_model_dir)
