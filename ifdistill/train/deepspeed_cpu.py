"""DeepSpeed ZeRO on CPU processes (gloo): a test-only subclass of Lightning's ``DeepSpeedStrategy``.

Lightning 2.6's ``DeepSpeedStrategy`` refuses any accelerator but CUDA, although DeepSpeed 0.19 runs
ZeRO-2/3 on its CPU accelerator over gloo. It fails at three points (verified, see
``../shared/notes/cpu-training-and-vllm.md``), and this class overrides exactly those:

1. ``setup_environment`` rejects a non-CUDA accelerator -> set up the environment as plain DDP does;
2. ``setup_distributed`` validates device indices, and a CPU device has index ``None`` -> skip that
   check, keep the rest (seed reset, world ranks, DeepSpeed's process group);
3. engine creation passes ``device_rank=root_device.index`` (``None``) to ``deepspeed.initialize`` ->
   pass the local rank.

Nothing else changes, so CPU runs exercise Lightning's real DeepSpeed code paths (config, engine,
checkpointing, ZeRO-3 consolidation). GPU runs never use this class: see
:func:`ifdistill.train.strategies.deepspeed_strategy`. It overrides private Lightning methods, which
is why ``lightning`` is pinned; ``tests/integration/train/test_strategies.py`` exercises it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Optional

from lightning.fabric.utilities.seed import reset_seed
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy
from torch.nn import Module


class CPUDeepSpeedStrategy(DeepSpeedStrategy):
    """``DeepSpeedStrategy`` for ``accelerator="cpu"`` (process group backend gloo)."""

    strategy_name = "deepspeed_cpu"

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("process_group_backend", "gloo")
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        super().__init__(*args, **kwargs)

    def setup_environment(self) -> None:  # 1. no CUDA check
        DDPStrategy.setup_environment(self)

    def setup_distributed(self) -> None:  # 2. no device-index validation
        reset_seed()
        self.set_world_ranks()
        self._init_deepspeed_distributed()

    def _setup_model_and_optimizer(self, model: Module, optimizer: Optional[Any], lr_scheduler: Optional[Any] = None):
        import deepspeed  # 3. device_rank = local rank, not the (None) CUDA index

        engine, ds_optimizer, _, _ = deepspeed.initialize(
            args=argparse.Namespace(device_rank=self.local_rank),
            config=self.config,
            model=model,
            model_parameters=[p for p in model.parameters() if p.requires_grad],
            optimizer=optimizer,
            lr_scheduler=lr_scheduler,
            dist_init_required=False,
        )
        return engine, ds_optimizer
