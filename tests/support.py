"""Helpers shared by tests (importable as ``tests.support``; the root is on pytest's pythonpath)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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


def compare_with_oracle(oracle_score, rows, scored, is_random, crash=None):
    """Per-instruction parity of scored rows with an oracle, shared by the IFEval and IFBench tests.

    ``oracle_score(prompt, ids, kwargs, response) -> (strict_inst, loose_inst)``; an instruction
    with ``is_random(id, kwargs)`` is not compared (the reference draws an argument), nor one
    where the oracle's decision equals ``crash`` (the reference raises). Returns
    ``(decisions compared, random ones, crashes, disagreements)``; the last three are lists of
    ``(key, id, ...)`` tuples.
    """
    compared, random_ones, crashes, disagreements = 0, [], [], []
    for row, ours in zip(rows, scored, strict=True):
        strict, loose = oracle_score(row["prompt"], row["instruction_id_list"], row["kwargs"], row["response"])
        for i, (iid, kwargs) in enumerate(zip(row["instruction_id_list"], row["kwargs"], strict=True)):
            mine = (ours["strict_inst"][i], ours["loose_inst"][i])
            if is_random(iid, kwargs):
                random_ones.append((row.get("key"), iid))
            elif crash is not None and crash in (strict[i], loose[i]):
                crashes.append((row.get("key"), iid, (strict[i], loose[i]), mine))
            else:
                compared += 2
                if (strict[i], loose[i]) != mine:
                    disagreements.append((row.get("key"), iid, kwargs, (strict[i], loose[i]), mine))
    return compared, random_ones, crashes, disagreements


def run_python(code: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a fresh interpreter: import side effects start from nothing."""
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=120)
