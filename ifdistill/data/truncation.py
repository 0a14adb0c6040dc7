"""The length policy: what happens to a rendered example longer than ``max_length``.

Two policies, chosen per run (``data.truncation``):

- ``drop`` (default): the example is not trained on. Nothing the model sees is ever cut, so a
  template's structure is never broken, at the price of losing long examples.
- ``cut_prompt_left``: tokens are removed from the *left* of the prompt until the example fits; the
  final supervised span (the answer being learned) is never cut. If even that span plus the tokens
  between it and the end does not fit, the example is dropped. Cutting the left loses the system
  prompt and earlier turns first, which is what a long multi-turn conversation can best afford.

Either way the trailing tokens after the last supervised token (a template's newline after
``<|im_end|>``) are removed first: they carry no loss and only cost compute.

Every drop and cut is counted by :class:`LengthStats` with its reason, and those counts go into the
data manifest -- a ratio or token budget is only meaningful if what was thrown away is known.
"""

from __future__ import annotations

import collections
import dataclasses

from ifdistill.data.render import Rendered

POLICIES = ("drop", "cut_prompt_left")


@dataclasses.dataclass
class LengthStats:
    kept: int = 0
    cut: int = 0
    tokens_cut: int = 0
    supervised_tokens_cut: int = 0
    dropped: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def to_dict(self) -> dict:
        return {"kept": self.kept, "truncated": self.cut, "tokens_cut": self.tokens_cut,
                "supervised_tokens_cut": self.supervised_tokens_cut, "dropped": dict(self.dropped)}


def strip_tail(r: Rendered) -> Rendered:
    end = r.spans[-1][1]
    if end == len(r.input_ids):
        return r
    return Rendered(input_ids=r.input_ids[:end], loss_mask=r.loss_mask[:end], spans=r.spans)


def apply_length_policy(r: Rendered, max_length: int | None, policy: str, stats: LengthStats) -> Rendered | None:
    """The example to train on, or ``None`` when it is dropped (and counted)."""
    if policy not in POLICIES:
        raise ValueError(f"truncation policy must be one of {POLICIES}, got {policy!r}")
    r = strip_tail(r)
    if max_length is None or len(r.input_ids) <= max_length:
        stats.kept += 1
        return r
    if policy == "drop":
        stats.dropped["too_long"] += 1
        return None
    excess = len(r.input_ids) - max_length
    if excess >= r.prompt_len:  # would cut into the final answer (or leave it without any prompt)
        stats.dropped["answer_longer_than_max_length"] += 1
        return None
    # The first token of a sequence is predicted by nothing, so it cannot be supervised: a cut that lands
    # inside an earlier assistant turn starts the kept part at that turn's second token's target.
    spans = tuple((max(s - excess, 1), e - excess) for s, e in r.spans if e - excess > 1)
    mask = [0, *r.loss_mask[excess + 1:]]
    stats.kept += 1
    stats.cut += 1
    stats.tokens_cut += excess
    stats.supervised_tokens_cut += sum(r.loss_mask[:excess + 1])
    return Rendered(input_ids=r.input_ids[excess:], loss_mask=mask, spans=spans)
