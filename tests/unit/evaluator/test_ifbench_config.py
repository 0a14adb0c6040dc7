"""The IFBench eval options: which file each reads, and what their config hashes say.

``prepare`` does everything up to the hash (no backend). Offline, ``eval=ifbench`` cannot reach
the hub and reads the shared v2 copy: the same rows as ``eval=ifbench_local``, so the same hash,
with the fallback recorded. v1 and v2 differ in rows (even the first 268: three prompts lost
trailing whitespace in v2), so in hash.
"""

from __future__ import annotations

import pytest

from ifdistill.benchmarks.ifbench import scorer_version
from ifdistill.evaluator import run as run_module
from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.run import prepare


V1_SHA256 = "11c3d683dcc7f4908a4d3cacd05c9a8bbd5484af2f8fde969e7abe2b8bad3e34"
V2_SHA256 = "a2bf7b8e7ed11d39c65b4ec781da8b99663ed0121f97033d70fcecb61f8a9d85"


@pytest.fixture(autouse=True)
def _no_process_changes(monkeypatch):
    monkeypatch.setattr(run_module, "apply_runtime", lambda runtime: None)


def _plan(tmp_path, name: str, *overrides: str):
    return prepare(load_config([f"eval={name}", *overrides], output_dir=str(tmp_path / name)))


def test_ifbench_options(tmp_path):
    local, hub = _plan(tmp_path, "ifbench_local"), _plan(tmp_path, "ifbench")
    # v1's broken row "268" (seven rows run together) is 4431 tokens: past the tiny model's 2048
    v1 = _plan(tmp_path, "ifbench_v1_local", "eval.data.max_examples=268")
    assert len(local.prompts) == 300 and len(v1.prompts) == 268
    # the sha256 sums that shared/data/ifbench/README.md states for the two files
    assert local.data.identity["files"][0]["sha256"] == V2_SHA256
    assert v1.data.identity["files"][0]["sha256"] == V1_SHA256
    assert hub.data.identity["fallback_from"]["hf_name"] == "allenai/IFBench_test"
    assert hub.eval_config_hash == local.eval_config_hash != v1.eval_config_hash
    assert local.settings.benchmark == "ifbench"
    assert local.fingerprint["scorer_version"] == f"ifeval-1+{scorer_version()}"
    ifeval = _plan(tmp_path, "ifeval_local")
    assert ifeval.fingerprint["scorer_version"] == "ifeval-1" and ifeval.settings.benchmark == "ifeval"
