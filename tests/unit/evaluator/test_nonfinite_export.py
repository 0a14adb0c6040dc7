"""Weights holding a NaN or an infinity are never scored: the export check refuses them, naming the file and
the tensor, whether the export was written by training (export.json records the digests of the NaN
weights, so only the finiteness check can refuse it) or by another tool (a plain HF directory)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from ifdistill.evaluator.cli import load_config
from ifdistill.evaluator.errors import NonFiniteWeightsError
from ifdistill.evaluator.model_source import resolve_model_source
from ifdistill.hashing import weight_hashes
from tests.support import eval_cli

SMALL = ["eval=ifeval_local", "eval.backend=hf", "eval.data.max_examples=3", "eval.generation.max_new_tokens=4",
         "eval.runtime.progress=false"]


def poisoned_export(tiny_model_dir, root: Path, value: float, *, recorded: bool = True,
                    count: int = 1) -> tuple[Path, str]:
    """A copy of the tiny model as ``exports/step_000010/model`` with ``count`` elements of one tensor set
    to ``value``; ``recorded``: export.json records the digests of the poisoned files (what training would
    write had it exported them). Returns the export and the poisoned tensor's name."""
    export = root / "exports" / "step_000010"
    shutil.copytree(tiny_model_dir, export / "model")
    path = export / "model" / "model.safetensors"
    tensors = load_file(path)
    name = sorted(k for k in tensors if "mlp" in k)[0]
    tensors[name].view(-1)[7:7 + count] = value
    save_file(tensors, path, metadata={"format": "pt"})
    if recorded:
        (export / "export.json").write_text(json.dumps({"step": 10, "kinds": ["model"], "base_model": "builtin:tiny",
                                                        "weights": weight_hashes(export, recursive=True)}))
    return export, name


@pytest.mark.parametrize("value, recorded", [(float("nan"), True), (float("inf"), False)])
def test_a_non_finite_tensor_is_refused_naming_file_and_tensor(tiny_model_dir, tmp_path, value, recorded):
    export, name = poisoned_export(tiny_model_dir, tmp_path, value, recorded=recorded)
    cfg = load_config(SMALL, output_dir=str(tmp_path / "out"))
    target = export if recorded else export / "model"  # another tool's export: a plain HF directory
    with pytest.raises(NonFiniteWeightsError,
                       match=rf"model\.safetensors: tensor {name} holds 1 non-finite values \(NaN or infinity\)"):
        resolve_model_source(cfg.model, export_dir=str(target))


@pytest.mark.parametrize("value", [0.5, 3e38])  # 2 x 3e38: finite, but the tensor's float32 sum overflows
def test_finite_weights_are_accepted(tiny_model_dir, tmp_path, value):
    export, _ = poisoned_export(tiny_model_dir, tmp_path, value, count=2)
    model = load_config(SMALL, output_dir=str(tmp_path / "out")).model
    source = resolve_model_source(model, export_dir=str(export))
    assert source.model_dir == str((export / "model").resolve())


def test_the_evaluator_refuses_a_nan_export_with_one_line_and_exit_2(tiny_model_dir, tmp_path):
    export, name = poisoned_export(tiny_model_dir, tmp_path, float("nan"))
    done, out = eval_cli(tmp_path, *SMALL, f"export_dir={export}")
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("ifdistill-eval: error:")]
    assert errors == [f"ifdistill-eval: error: {export / 'model' / 'model.safetensors'}: tensor {name} holds 1 "
                      f"non-finite values (NaN or infinity) of {load_file(export / 'model' / 'model.safetensors')[name].numel()}: "
                      "these weights diverged and are not evaluated; evaluate an earlier checkpoint"]
    assert "Traceback" not in done.stderr and not (out / "results.json").exists()
