"""Starting the evaluator as a separate OS process: the command line and the environment.

The checkpoint callback (``ifdistill.callbacks.checkpoint_eval``) and the SLURM runner use
:func:`evaluator_command`; it runs the very program a researcher runs by hand (``ifdistill-eval``'s
``main``, as ``python -m ifdistill.evaluator.cli`` with the trainer's interpreter), with the run's
resolved ``eval`` section. So an in-training evaluation and a later ``ifdistill-eval`` on the same
export with the same ``eval`` config produce the same responses and the same ``eval_config_hash``.

How the config travels: the resolved ``eval`` section (interpolations such as ``${model.dtype}``
resolved in the *trainer's* config, relative data paths made absolute) is written to
``<out_dir>/.request/eval/_request.yaml`` and selected with ``--config-dir <out_dir>/.request
eval=_request`` -- YAML carries any chat template or stop string that a command-line override would
have to escape, and the file stays next to the result as a record of what was asked.

Environment (:func:`clean_environment`): a trainer's rank and rendezvous variables would make vLLM
(which reads ``LOCAL_RANK`` for its device) or torch.distributed join the training job, and SLURM
step/task variables describe the trainer's task, not the evaluator's. They are removed; devices and
threads then come from ``eval.runtime`` (``devices`` overrides its keys, e.g.
``{"cuda_visible_devices": "1"}`` or ``{"cpu_threads_bind": "1"}``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, MutableMapping, Optional

import yaml

from ifdistill.evaluator.settings import RuntimeSettings, eval_settings
from ifdistill.runs.rundir import EXPORT_JSON

DISTRIBUTED_VARS = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_WORLD_SIZE", "ROLE_NAME", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_TASK_PID", "SLURM_GTIDS", "SLURM_STEPID",
    "SLURM_SRUN_COMM_HOST", "SLURM_SRUN_COMM_PORT", "SLURM_LAUNCH_NODE_IPADDR",
    "IFDISTILL_LAUNCH_ID",  # a training launch's job-folder id (ifdistill/config.py): an evaluation is its own launch
)
DISTRIBUTED_PREFIXES = ("TORCHELASTIC_", "SLURM_STEP_", "SLURM_CPU_BIND", "PL_")
# Thread counts a trainer sets for itself (Lightning's DDP sets OMP_NUM_THREADS = cores / world size).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: The :data:`THREAD_VARS` of the training command's own environment, as JSON, recorded by
#: ``ifdistill-train`` before Lightning sets any (:func:`record_launch_threads`): its evaluators keep these.
LAUNCH_THREADS_ENV = "IFDISTILL_LAUNCH_THREADS"
REQUEST_DIR = ".request"
REQUEST_NAME = "_request"


def record_launch_threads(env: MutableMapping[str, str]) -> None:
    """Record the thread counts the user gave the command (once: a DDP rank inherits rank 0's record)."""
    env.setdefault(LAUNCH_THREADS_ENV, json.dumps({k: env[k] for k in THREAD_VARS if k in env}, sort_keys=True))


def clean_environment(env: MutableMapping[str, str], *, drop_thread_vars: bool = False) -> MutableMapping[str, str]:
    """Remove a trainer's distributed / SLURM-step variables from ``env`` (in place; returned)."""
    for name in list(env):
        if name in DISTRIBUTED_VARS or name.startswith(DISTRIBUTED_PREFIXES) or (
                drop_thread_vars and name in THREAD_VARS):
            del env[name]
    return env


def _quote(value: Any) -> str:
    """A Hydra override value as a quoted string (paths may hold spaces, commas or '=')."""
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def _absolute(path: Optional[str]) -> Optional[str]:
    return str(Path(path).expanduser().absolute()) if path else path


def _plain(section: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a resolved section of plain values (dicts, lists, scalars)."""
    return json.loads(json.dumps(dict(section)))


def _yaml(section: Mapping[str, Any]) -> str:
    return yaml.safe_dump(section, sort_keys=False, allow_unicode=True, width=1 << 16)


def request_eval_section(eval_cfg: Mapping[str, Any], devices: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The ``eval`` section (resolved, plain values) as the evaluator process will read it: validated, paths
    absolute, ``devices`` applied to ``runtime``."""
    section = _plain(eval_cfg)
    runtime_keys = {f.name for f in dataclasses.fields(RuntimeSettings)}
    unknown = sorted(set(devices or {}) - runtime_keys)
    if unknown:
        raise ValueError(f"devices: unknown keys {unknown}; use keys of eval.runtime: {sorted(runtime_keys)}")
    section.setdefault("runtime", {}).update(dict(devices or {}))
    for src in (section.get("data"), (section.get("fewshot") or {}).get("pool")):
        if src:
            src["path"], src["fallback_path"] = _absolute(src.get("path")), _absolute(src.get("fallback_path"))
    template = (section.get("generation") or {}).get("chat_template")
    if template and "{{" not in template and "{%" not in template:
        section["generation"]["chat_template"] = _absolute(template)
    eval_settings(section)  # fail here, in the trainer, rather than in every evaluation process
    return section


def _export_base(model_dir: Path) -> Optional[str]:
    info = model_dir / EXPORT_JSON
    if info.is_file():
        return json.loads(info.read_text()).get("base_model")
    return None


def evaluator_command(eval_cfg: Mapping[str, Any], model_dir: str | os.PathLike, out_dir: str | os.PathLike, *,
                      kind: str = "auto", devices: Optional[Mapping[str, Any]] = None,
                      model_cfg: Optional[Mapping[str, Any]] = None, overrides: Iterable[str] = (),
                      python: Optional[str] = None,
                      base_env: Optional[Mapping[str, str]] = None) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` that evaluate ``model_dir`` into ``out_dir`` in a separate process.

    ``eval_cfg``: the run's ``eval`` section, resolved (plain values: the checkpoint callback receives them so).
    ``model_dir``: an export ``exports/step_XXXXXX`` or any HF model / adapter directory; ``kind``
    picks the part of an export (auto | adapter | merged | model). ``devices``: overrides of
    ``eval.runtime`` for this process. ``model_cfg``: the run's ``model`` section (optional; without
    it the export's recorded base model is used). Writes ``<out_dir>/.request/`` (the config files
    the command refers to); starts nothing.
    """
    out = Path(out_dir).absolute()
    model_path = Path(model_dir).absolute()
    request = out / REQUEST_DIR
    (request / "eval").mkdir(parents=True, exist_ok=True)
    section = request_eval_section(eval_cfg, devices)
    (request / "eval" / f"{REQUEST_NAME}.yaml").write_text(
        "# The resolved eval section this evaluation was started with (ifdistill/evaluator/launch.py).\n"
        + _yaml(section))
    argv = [python or sys.executable, "-m", "ifdistill.evaluator.cli", f"--config-dir={request}",
            f"eval={REQUEST_NAME}"]
    if model_cfg is not None:
        (request / "model").mkdir(exist_ok=True)
        (request / "model" / f"{REQUEST_NAME}.yaml").write_text(_yaml(_plain(model_cfg)))
        argv.append(f"model={REQUEST_NAME}")
    elif _export_base(model_path):
        argv.append(f"model.name_or_path={_quote(_export_base(model_path))}")
    argv += [f"export_dir={_quote(model_path)}", f"export_kind={kind}", f"output_dir={_quote(out)}",
             f"hydra.run.dir={_quote(out)}", "overwrite=true", *overrides]
    env = dict(os.environ if base_env is None else base_env)
    clean_environment(env, drop_thread_vars=True)
    env.update(json.loads(env.get(LAUNCH_THREADS_ENV) or "{}"))  # the user's, not a DDP rank's
    cuda = section.get("runtime", {}).get("cuda_visible_devices")
    if cuda is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(cuda)
    env["PYTHONUNBUFFERED"] = "1"
    return argv, env
