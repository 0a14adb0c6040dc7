"""What on-policy training logs about its samples, so that a failing run shows it early.

Reverse-KL on-policy distillation fails in recognisable ways: samples grow to the budget and stop
ending (the teacher rewards continuing), entropies collapse, the divergence goes to zero on degenerate
text. Per logging interval (token sums like every other metric, :mod:`ifdistill.train.token_sums`):

- ``onpolicy/sampled_len``: mean completion length of the samples (tokens, stop token included);
- ``onpolicy/eos_rate`` and ``onpolicy/budget_hit_rate``: the share of samples that ended with a stop
  token, and the share that hit ``max_new_tokens`` instead (they add to 1);
- ``onpolicy/staleness_steps``: optimizer steps between the weights that sampled and the weights trained
  (0 for samples from the training model itself);
- the divergence ``train/kd`` and the entropies ``train/entropy`` / ``teacher/entropy`` come from the
  objective's sums.

Every ``table_every`` steps the first micro-batch's samples (up to ``table_rows``) go to W&B as a table
(``onpolicy/samples``: step, text, length, ended). When ``eos_rate`` stays below ``min_eos_rate`` for
``patience`` logging intervals in a row the monitor warns (``action=warn``) or stops training
(``action=stop``: the trainer stops after the step, checkpointing as at any end).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ifdistill.methods.onpolicy_distill.sampling import Sample
from ifdistill.train.token_sums import ratio

log = logging.getLogger(__name__)

GEN_KEYS = ("gen_rows", "gen_tokens", "gen_eos")


class SampleMonitor:
    def __init__(self, tokenizer: Any, *, table_every: int, table_rows: int, min_eos_rate: float, patience: int,
                 action: str):
        # the values, their defaults and ranges: OnPolicyDistillSettings (settings.py), from which the module
        # passes them
        self.tokenizer, self.table_every, self.table_rows = tokenizer, table_every, table_rows
        self.min_eos_rate, self.patience, self.action = min_eos_rate, patience, action
        self.low_intervals = 0
        self.table: list[list[Any]] = []  # rows waiting for the next log
        self.table_step = -1
        self.collapsed = False

    def sums(self, samples: Sequence[Sample], trainer: Any, batch: Mapping[str, Any]) -> dict[str, float]:
        """This micro-batch's generation sums; keeps a few samples for the table on a table step."""
        if trainer is not None and self.table_rows and samples:
            step = trainer.global_step
            if step % self.table_every == 0 and step != self.table_step:  # the step's first sampled micro-batch
                self.table_step = step
                self.table = [[step, self.tokenizer.decode(s.tokens), len(s.tokens), s.ended]
                              for s in samples[:self.table_rows]]
        return {"gen_rows": float(len(samples)), "gen_tokens": float(sum(len(s.tokens) for s in samples)),
                "gen_eos": float(sum(s.ended for s in samples))}

    def metrics(self, sums: Mapping[str, float], trainer: Any, loggers: Sequence[Any], *,
                staleness: float = 0.0) -> dict[str, float]:
        eos = ratio(sums, "gen_eos", "gen_rows")
        out = {"onpolicy/sampled_len": ratio(sums, "gen_tokens", "gen_rows"), "onpolicy/eos_rate": eos,
               "onpolicy/budget_hit_rate": 1.0 - eos, "onpolicy/staleness_steps": float(staleness)}
        if self.table and trainer is not None and trainer.is_global_zero:
            for lg in loggers:
                if hasattr(lg, "log_text"):  # W&B
                    lg.log_text(key="onpolicy/samples", columns=["step", "text", "length", "ended"], data=self.table)
        self.table = []
        self.check_eos(eos, trainer)
        return out

    def check_eos(self, eos_rate: float, trainer: Any) -> None:
        """Count logging intervals under ``min_eos_rate``; warn or stop at ``patience`` (module docstring)."""
        if self.min_eos_rate <= 0 or math.isnan(eos_rate):
            return
        self.low_intervals = self.low_intervals + 1 if eos_rate < self.min_eos_rate else 0
        if self.low_intervals < self.patience:
            return
        message = (f"on-policy samples end with a stop token at rate {eos_rate:.3f} < method.min_eos_rate="
                   f"{self.min_eos_rate} for {self.low_intervals} logging intervals (samples run to the budget)")
        if self.action == "stop" and trainer is not None:
            self.collapsed = True
            trainer.should_stop = True
            log.error("%s: stopping (method.on_eos_collapse=stop)", message)
        else:
            log.warning(message)
