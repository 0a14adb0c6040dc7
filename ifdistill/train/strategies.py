"""Strategy factories named by ``conf/trainer/*.yaml`` (``strategy._target_``).

Each returns Lightning's own strategy on GPUs. On CPU they pick what works there (verified on Lightning
2.6.6, see ``../shared/notes/cpu-training-and-vllm.md``): gloo for DDP; the small
:class:`~ifdistill.train.deepspeed_cpu.CPUDeepSpeedStrategy` for ZeRO-2/3; FSDP2 through
``ModelParallelStrategy`` (FSDP1 cannot run on CPU at all). The LightningModule shards itself for FSDP2
in ``configure_model`` (:meth:`ifdistill.methods.sft.module.SFTModule.configure_model`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import torch

from ifdistill.train.strategy_settings import FSDP2, ZERO, ZERO3, Zero3Settings


def on_cpu(accelerator: str = "auto") -> bool:
    """Whether this process will train on CPU (``auto`` = no CUDA device visible)."""
    return accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())


def ddp(accelerator: str = "auto", find_unused_parameters: bool = False, **kwargs: Any):
    from lightning.pytorch.strategies import DDPStrategy

    if on_cpu(accelerator):
        kwargs.setdefault("process_group_backend", "gloo")
    return DDPStrategy(find_unused_parameters=find_unused_parameters, **kwargs)


def deepspeed_strategy(stage: int = ZERO.stage, accelerator: str = ZERO.accelerator, *,
                       offload_optimizer: Optional[str] = ZERO.offload_optimizer,
                       offload_parameters: Optional[str] = ZERO3.offload_parameters,
                       zero: Optional[Mapping[str, Any]] = None,
                       exclude_frozen_parameters: bool = ZERO.exclude_frozen_parameters, **kwargs: Any):
    """ZeRO stage 2 or 3. ``offload_optimizer`` / ``offload_parameters``: ``null``, ``cpu`` or ``nvme``
    (the settings and their defaults: :mod:`ifdistill.train.strategy_settings`).

    ``zero`` entries are merged into the ``zero_optimization`` section last (e.g.
    ``stage3_param_persistence_threshold: 0`` to really shard tiny tensors in tests). With the optimizer
    offloaded, a torch optimizer is allowed (``zero_force_ds_cpu_optimizer: false``) unless
    ``optim.name=deepspeed_cpu_adam`` selects DeepSpeed's faster one.
    """
    # the range checks (a ValueError naming the key): stage, the offload devices, parameters offloaded at stage 3 only
    Zero3Settings(stage=stage, offload_optimizer=offload_optimizer, offload_parameters=offload_parameters)
    kwargs.setdefault("logging_batch_size_per_gpu", 1)  # only DeepSpeed's throughput log reads it
    args = dict(stage=stage, offload_optimizer=bool(offload_optimizer), offload_parameters=bool(offload_parameters),
                offload_optimizer_device=offload_optimizer or "cpu", offload_params_device=offload_parameters or "cpu",
                exclude_frozen_parameters=exclude_frozen_parameters, **kwargs)
    if on_cpu(accelerator):
        from ifdistill.train.deepspeed_cpu import CPUDeepSpeedStrategy

        strategy = CPUDeepSpeedStrategy(**args)
    else:
        from lightning.pytorch.strategies import DeepSpeedStrategy

        strategy = DeepSpeedStrategy(**args)
    strategy.config["zero_optimization"].update(dict(zero or {}))
    if offload_optimizer:
        strategy.config["zero_force_ds_cpu_optimizer"] = False
    return strategy


def fsdp2(devices: int = FSDP2.devices, num_nodes: int = FSDP2.num_nodes, accelerator: str = FSDP2.accelerator,
          save_distributed_checkpoint: bool = FSDP2.save_distributed_checkpoint, **kwargs: Any):
    """FSDP2 (``fully_shard``) over all ranks: data-parallel size = devices x nodes, no tensor parallelism."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    if on_cpu(accelerator):
        kwargs.setdefault("process_group_backend", "gloo")
    return ModelParallelStrategy(data_parallel_size=int(devices) * int(num_nodes), tensor_parallel_size=1,
                                 save_distributed_checkpoint=save_distributed_checkpoint, **kwargs)
