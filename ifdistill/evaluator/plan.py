"""``PlanBase``: what every benchmark's plan holds, apart from the code that builds each plan.

IFEval-style rows (:class:`ifdistill.evaluator.run.EvalPlan`) and lm-eval tasks
(:class:`ifdistill.evaluator.lmeval.run.LMEvalPlan`) extend it; the persistent server
(:mod:`ifdistill.evaluator.serve`) reads only these fields, so it serves every benchmark alike.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import socket
from typing import Any, Mapping, Optional

from ifdistill.evaluator.model_source import ModelSource
from ifdistill.evaluator.results import process_runtime
from ifdistill.evaluator.schema import RESULTS_SCHEMA_VERSION
from ifdistill.evaluator.settings import EvalRunSettings, EvalSettings, as_dict


@dataclasses.dataclass(kw_only=True)
class PlanBase:
    """The model, its engine's needs and the identity, decided before any engine starts."""

    settings: EvalSettings
    run: EvalRunSettings
    model_cfg: dict[str, Any]
    source: ModelSource
    tokenizer: Any
    chat_template: str
    context_len: int
    fingerprint: dict[str, Any]
    eval_config_hash: str
    model_identity: dict[str, Any]
    prepare_s: float

    def results_record(self, *, scores: Mapping[str, Any], data: Mapping[str, Any], backend: Mapping[str, Any],
                       runtime: Optional[Mapping[str, Any]], versions: Mapping[str, Any],
                       timings: Mapping[str, Any]) -> dict[str, Any]:
        """results.json's content: the identity, config and provenance every benchmark records the same way,
        around the benchmark's own ``scores`` (metrics, per-task records, counts), ``data`` identity and
        ``timings``. ``runtime``: the process's as given by its runner, else this process's."""
        return {
            "schema_version": RESULTS_SCHEMA_VERSION,
            "eval_config_hash": self.eval_config_hash,
            "fingerprint": self.fingerprint,
            **scores,
            "model": self.model_identity,
            "data": dict(data),
            "config": {"eval": as_dict(self.settings), "model": self.model_cfg, "adapter_dir": self.run.adapter_dir,
                       "export_dir": self.run.export_dir, "export_kind": self.run.export_kind,
                       "output_dir": str(self.run.output_dir)},
            "backend": dict(backend),
            "runtime": dict(runtime) if runtime is not None else process_runtime(),
            "versions": dict(versions),
            "timings": dict(timings),
            "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "host": socket.gethostname(),
        }
