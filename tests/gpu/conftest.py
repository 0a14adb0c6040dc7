"""GPU tests: collected everywhere, skipped with the reason where no CUDA device is visible.

The skip is added here (not by deselecting), so ``make test`` lists every GPU test as skipped with its
reason (``-ra``) on a machine without a GPU, and ``pytest -m gpu`` on a lent GPU runs them
(``scripts/gpu_check.py`` does both). CI has no GPU: there the skip is expected, not a missing component.
"""

from __future__ import annotations

import pytest

from tests.integration.evaluator.conftest import tuned  # noqa: F401  (the echo-tuned tiny model)
from tests.unit.train.conftest import icl_items  # noqa: F401  (real tiny batches with a 2-shot teacher view)


def cuda_skip_reason() -> str | None:
    """Why GPU tests cannot run here, or None when a CUDA device is visible."""
    import torch

    if torch.cuda.is_available():
        return None
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    return f"needs a CUDA GPU: torch {torch.__version__} ({build}) sees no CUDA device"


def pytest_collection_modifyitems(config, items):
    reason = cuda_skip_reason()
    if reason is None:
        return
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


def two_gpus_or_skip() -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 CUDA GPUs for an evaluator on its own GPU; {torch.cuda.device_count()} visible")
