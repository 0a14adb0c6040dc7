"""Helpers shared by tests (importable as ``tests.support``; the root is on pytest's pythonpath)."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip when a real component is unavailable on a developer's machine; fail in CI.

    CI must never skip a real-component test silently, so there a missing prerequisite is an error.
    """
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


def flip_bytes(path, n: int = 4096) -> None:
    """Invert ``n`` bytes in the middle of a file (same size, so only a content check can notice)."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        block = f.read(n)
        f.seek(-len(block), 1)
        f.write(bytes(b ^ 0xFF for b in block))
