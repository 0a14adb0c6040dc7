"""The settings of the strategy factories (:mod:`ifdistill.train.strategies`): the one home of their defaults.

The factories' signatures read these dataclasses, and Hydra composes each ``trainer.strategy`` node of
``conf/trainer/*.yaml`` from one of them (``schema/zero2``, ``schema/zero3``, ``schema/fsdp2``), so the YAML
states only wiring (``accelerator: ${..accelerator}``) and choices. The nodes are closed: the factories pass
``**kwargs`` on to Lightning, so preflight cannot check a key against their signatures, and Hydra refuses a
misspelt one as it composes (``_target_`` and the wiring are fields for that reason). DeepSpeed's own
keywords join a node with ``+``. ``exclude_frozen_parameters`` is a field the node holds only when a command
line adds it (:func:`ifdistill.config.only_when_set`): as a composed key it would enter every shipped tree,
and with it the config hash, which covers ``trainer.strategy``. This module imports nothing heavy, so
composing a config does not import torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from ifdistill.config import lookup, only_when_set, store_target_schema

MISSING = "???"  # OmegaConf's mark of a value the YAML must give (the factory's _target_)


OFFLOAD_DEVICES = (None, "cpu", "nvme")


@dataclass
class Zero2Settings:
    """``deepspeed_strategy`` at ZeRO stage 2: optimizer state and gradients sharded."""

    _target_: str = MISSING  # the YAML names the factory
    accelerator: str = "auto"  # the YAML wires the trainer's
    stage: int = 2
    offload_optimizer: Optional[str] = None  # null | cpu | nvme
    zero: dict[str, Any] = field(default_factory=dict)  # extra zero_optimization entries, merged last
    # checkpoints without the frozen parameters (LoRA: the adapter and optimizer state only)
    exclude_frozen_parameters: bool = only_when_set(False)

    def __post_init__(self) -> None:
        if self.stage not in (1, 2, 3):
            raise ValueError(f"stage: DeepSpeed ZeRO stage must be 1, 2 or 3, got {self.stage}")
        for key in ("offload_optimizer", "offload_parameters"):
            if getattr(self, key, None) not in OFFLOAD_DEVICES:
                raise ValueError(f"{key}: must be null, cpu or nvme, got {getattr(self, key)!r}")
        if getattr(self, "offload_parameters", None) and self.stage < 3:
            raise ValueError("offload_parameters: needs ZeRO stage 3")


@dataclass
class Zero3Settings(Zero2Settings):
    """ZeRO stage 3: the parameters sharded too (``zero: {stage3_param_persistence_threshold: 0}`` shards even
    small tensors, as the tests do)."""

    stage: int = 3
    offload_parameters: Optional[str] = None  # null | cpu | nvme (stage 3 only)


@dataclass
class FSDP2Settings:
    _target_: str = MISSING
    devices: int = 1  # the YAML wires the trainer's devices, num_nodes and accelerator
    num_nodes: int = 1
    accelerator: str = "auto"
    save_distributed_checkpoint: bool = True  # each rank writes its shard (false: one full checkpoint on rank 0)


#: The defaults, read by the factories' signatures.
ZERO, ZERO3, FSDP2 = Zero2Settings(), Zero3Settings(), FSDP2Settings()

store_target_schema("zero2", Zero2Settings, closed=True)
store_target_schema("zero3", Zero3Settings, targets=("ifdistill.train.strategies.deepspeed_strategy",), closed=True)
store_target_schema("fsdp2", FSDP2Settings, targets=("ifdistill.train.strategies.fsdp2",), closed=True)


def strategy_name(tree: Mapping[str, Any]) -> str:
    """``trainer.strategy`` of a plain config tree as text: its ``_target_`` when it is built, else the name
    Lightning takes (``ddp``); empty when none is set. What checks of a strategy's family search."""
    node = lookup(tree, "trainer.strategy", "")
    return str(node.get("_target_", "") if isinstance(node, Mapping) else node or "")
