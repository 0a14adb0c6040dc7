"""The profiled step's device busy time (bench/step_costs.py): each moment the device works counts once."""

from __future__ import annotations

import pytest
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

from bench.step_costs import device_busy_seconds, union_length


@pytest.mark.parametrize("spans, length", [
    ([], 0.0),
    ([(0, 10)], 10.0),
    ([(0, 10), (20, 25)], 15.0),  # a gap is not busy
    ([(0, 10), (5, 15)], 15.0),  # overlapping kernels (two streams) count once
    ([(0, 30), (5, 10), (12, 20)], 30.0),  # nested spans add nothing
    ([(20, 25), (0, 10), (8, 12)], 17.0),  # any order
])
def test_union_length(spans, length):
    assert union_length(spans) == length


def _event(name, start, end, device_type, annotation=False):
    return FunctionEvent(id=0, name=name, thread=0, start_us=start, end_us=end, device_type=device_type,
                         is_user_annotation=annotation)


def test_device_busy_counts_kernels_once_and_neither_operators_nor_annotations():
    events = [
        _event("aten::mm", 0, 400, DeviceType.CPU),  # the operator that launched the kernel: host time
        _event("gemm_kernel", 100, 300, DeviceType.CUDA),
        _event("copy_kernel", 250, 350, DeviceType.CUDA),  # overlaps the gemm on another stream
        _event("Optimizer.step#AdamW.step", 0, 1000, DeviceType.CUDA, annotation=True),
        _event("adam_kernel", 600, 700, DeviceType.CUDA),
    ]
    # kernels cover [100, 350) and [600, 700): 350 us; the one rounding is the division to seconds
    assert device_busy_seconds(events) == pytest.approx(350e-6, abs=1e-12)
