"""Helpers shared by tests (importable as ``tests.support``; the root is on pytest's pythonpath)."""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

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


@contextlib.contextmanager
def small_filesystem(path: Path, size: int | str):
    """A real tmpfs of ``size`` bytes at ``path`` (needs root; a skip on a developer's machine, a failure in
    CI); yields a function that resizes it (a size below what it holds is refused by the kernel)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = shutil.which("mount") is not None and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode == 0
    require(mounted, "cannot mount a tmpfs here (needs root)")
    try:
        yield lambda new: subprocess.run(["mount", "-o", f"remount,size={new}", str(path)], check=True)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


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


def eval_section(overrides: list[str], run_dir: str | Path) -> dict:
    """The ``eval`` section of the composed ``ifdistill-eval`` config, resolved to plain values: what a training run's
    checkpoint callback receives (its sections are instantiated with ``_convert_="all"``)."""
    from omegaconf import OmegaConf

    from ifdistill.evaluator.cli import compose_config

    return OmegaConf.to_container(compose_config(overrides, output_dir=str(run_dir)).eval, resolve=True)


def run_python(code: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) in a fresh interpreter: import side effects start from nothing."""
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=120)


def eval_cli(tmp_path: Path, *overrides: str) -> tuple[subprocess.CompletedProcess, Path]:
    """``ifdistill-eval <overrides>`` as a user runs it, writing to ``tmp_path/out``; returns the finished
    process and that output directory."""
    out = tmp_path / "out"
    script = Path(sys.executable).parent / "ifdistill-eval"
    done = subprocess.run([str(script), *overrides, f"output_dir={out}", f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return done, out


def flip_bytes(path, n: int = 4096) -> None:
    """Invert ``n`` bytes in the middle of a file (same size, so only a content check can notice)."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 2)
        block = f.read(n)
        f.seek(-len(block), 1)
        f.write(bytes(b ^ 0xFF for b in block))


# -- tolerances of equality-of-training comparisons ---------------------------------------------------
# Two computations that are equal in exact arithmetic (DDP vs ZeRO vs FSDP, 2x4 accumulated vs batch 8)
# differ in float32 only by the order of their sums. The bounds below are derived from that; each test
# states next to its assertion which quantities it plugs in and what a real bug would produce instead.

F32_UNIT_ROUNDOFF = 2.0 ** -24  # u: |fl(x) - x| <= u |x| for one float32 rounding
ROUNDOFF_LAMBDA = 4.0  # probabilistic bound constant: holds with probability >= 1 - 2 exp(-8) ~ 0.9993
ADAM_RELATIVE_UPDATE_ERROR = 1e-2


def sum_relative_error(n_terms: float) -> float:
    """Relative error of a float32 sum of ``n_terms`` terms in another order: ``λ sqrt(n) u``, the
    probabilistic rounding-error bound for independent roundings (Higham & Mary, 2019), instead of the
    worst case ``n u`` that is never reached and would hide real differences."""
    return ROUNDOFF_LAMBDA * math.sqrt(n_terms) * F32_UNIT_ROUNDOFF


def sgd_weight_tolerance(movement: float, weight_max: float, steps: int, n_terms: float) -> float:
    """Largest ``|w_a - w_b|`` between two SGD runs that differ only in summation order.

    SGD moves a weight by ``lr * g`` per step; a gradient summed over ``n_terms`` token contributions
    in another order is off by ``sum_relative_error(n_terms)`` of its size, so the total movement
    (``movement`` = max |w_T - w_0|) is off by that fraction of it; and every update ``w - lr g``
    rounds once more (``u |w|`` per step).
    """
    return movement * sum_relative_error(n_terms) + steps * F32_UNIT_ROUNDOFF * weight_max


def adam_weight_tolerance(lr: float, steps: int) -> float:
    """Largest ``|w_a - w_b|`` between two Adam(W) runs that differ only in summation order.

    Adam moves a weight by ``lr * m/(sqrt(v)+eps)``: at most about ``lr`` per step, whatever the
    gradient's scale. Roundoff enters as a relative perturbation of the gradient, which cancellation
    can make large for a near-zero coordinate, so no bound follows from ``u`` alone; the bound is a
    fraction (1 %) of the largest movement ``lr * steps``. The bugs these comparisons exist for (a step
    on a different gradient: a missing all-reduce, a per-micro-batch instead of per-step token mean, a
    skipped or repeated step, a wrong learning rate) change an update by a sizeable part of ``lr``, i.e.
    by about ``1/steps`` of the movement (12 % for 8 steps). Measured roundoff differences: 0.18 % (ZeRO-3
    vs DDP, 1.46e-6 of 8e-4) and 0.06 % (2x4 vs 8, 1.27e-7 of 2e-4). A constant gradient factor is
    invisible to Adam at any tolerance: SGD comparisons test the gradient's scale.
    """
    return ADAM_RELATIVE_UPDATE_ERROR * lr * steps


# -- processes (the no-process-left-behind checks) --

def _live_processes() -> dict[int, list[str]]:
    """``pid -> stat fields after the name`` of every live process (zombies count as gone)."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            out[int(proc.name)] = fields
    return out


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (an evaluator started with ``start_new_session``: its pid)."""
    return [pid for pid, fields in _live_processes().items() if int(fields[3]) == sid]


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``."""
    children: dict[int, list[int]] = {}
    for child, fields in _live_processes().items():
        children.setdefault(int(fields[1]), []).append(child)
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def left_behind(before: list[int]) -> list[int]:
    """Processes below this one that were not there in ``before`` (a :func:`descendants` snapshot taken
    when the test started). Only new ones count: earlier tests in the same pytest process legitimately
    leave long-lived helpers of pytest itself (multiprocessing's resource tracker, started by an
    in-process vLLM engine, lives until the interpreter exits)."""
    return sorted(set(descendants(os.getpid())) - set(before))


def first_divergence(tok, response_a: str, response_b: str, end_id: int) -> tuple[int, list[int], int, int]:
    """Where two greedy responses to one prompt part: the first differing token position ``k`` (their
    common prefix ``ids_a[:k]``), ``response_a``'s ids, and the two tokens chosen there (``end_id`` where a
    response ended) -- what a near-tie check scores against the model's logits."""
    ids_a = tok(response_a, add_special_tokens=False)["input_ids"]
    ids_b = tok(response_b, add_special_tokens=False)["input_ids"]
    n = min(len(ids_a), len(ids_b))
    k = next((j for j in range(n) if ids_a[j] != ids_b[j]), n)
    return k, ids_a, (ids_a[k] if k < len(ids_a) else end_id), (ids_b[k] if k < len(ids_b) else end_id)
