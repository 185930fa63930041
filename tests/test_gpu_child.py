"""The GPU benchmark's kernel table (`benchmarks.gpu_child.kernel_table`), on profiler averages made here: the GPU
run itself needs a GPU (benchmarks/test_gpu.py)."""

from enum import Enum
from types import SimpleNamespace

from benchmarks.gpu_child import kernel_table

Device = Enum("Device", "CPU CUDA")


def event(key, device, count, microseconds):
    return SimpleNamespace(key=key, device_type=device, count=count, self_device_time_total=microseconds)


def test_the_kernel_table_counts_gpu_kernels_alone_per_step():
    averages = [event("aten::mm", Device.CPU, 40, 0.0),
                event("gemm", Device.CUDA, 40, 3000.0),
                event("softmax", Device.CUDA, 20, 1000.0),
                event("copy", Device.CUDA, 60, 600.0)]
    table = kernel_table(averages, steps=20, top=2)
    assert table["ms_per_step"] == 4.6 / 20
    assert table["launches_per_step"] == 6.0
    assert [row["name"] for row in table["top"]] == ["gemm", "softmax"]
    assert table["top"][0] == {"name": "gemm", "per_step": 2.0, "ms_per_step": 0.15}
