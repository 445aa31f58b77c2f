"""What a plan prices for: an accelerator's published peaks (`DEVICES`) or this machine's
measured ones, the memory a program may use, and the accelerator's code path traced here."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Iterator

from ..measure import roofline

# The share of a device's memory a JAX process may use by default: JAX preallocates 75% of an
# accelerator's memory for its allocator (XLA_PYTHON_CLIENT_MEM_FRACTION changes it).
DEVICE_MEMORY_FRACTION = 0.75
# The share of this machine's available memory a rehearsed program may take.
LOCAL_MEMORY_FRACTION = 0.6


# --------------------------------------------------------------------------------------------
# Devices


@dataclasses.dataclass(frozen=True)
class Device:
    """An accelerator's published peaks.

    Attributes:
        name: the product.
        flops_per_s: the FLOP/s the bound uses: the dense TF32 tensor-core peak, the rate of
            float32 matmuls at JAX's default precision on these GPUs (element-wise work runs at
            the lower FP32 rate, so this peak gives the smaller time: a lower bound).
        fp32_flops_per_s: the FP32 (non-tensor) peak, shown for reference.
        bf16_flops_per_s: the dense BF16 tensor-core peak, shown for reference.
        bytes_per_s: memory bandwidth.
        memory_bytes: memory (decimal gigabytes, as the datasheet states them).
        source: where the numbers come from.
    """

    name: str
    flops_per_s: float
    fp32_flops_per_s: float
    bf16_flops_per_s: float
    bytes_per_s: float
    memory_bytes: float
    source: str

    def peaks(self) -> roofline.Peaks:
        return roofline.Peaks(self.flops_per_s, self.bytes_per_s, 0, 0)


_T = 1e12
DEVICES: dict[str, Device] = {
    # Dense rates: the datasheets print the tensor-core rates "with sparsity", twice these.
    "a100-40gb": Device("NVIDIA A100 40GB SXM", 156 * _T, 19.5 * _T, 312 * _T, 1.555e12, 40e9,
                        "NVIDIA A100 Tensor Core GPU datasheet"),
    "a100-80gb": Device("NVIDIA A100 80GB SXM", 156 * _T, 19.5 * _T, 312 * _T, 2.039e12, 80e9,
                        "NVIDIA A100 Tensor Core GPU datasheet"),
    "h100": Device("NVIDIA H100 SXM", 494.7 * _T, 67 * _T, 989.4 * _T, 3.35e12, 80e9,
                   "NVIDIA H100 Tensor Core GPU datasheet (SXM)"),
    "h200": Device("NVIDIA H200 SXM", 494.7 * _T, 67 * _T, 989.4 * _T, 4.8e12, 141e9,
                   "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
}


@dataclasses.dataclass(frozen=True)
class Target:
    """What the plan prices for: peaks, usable memory and a description."""

    description: str
    peaks: roofline.Peaks
    memory_bytes: float


def local_target(*, matmul_size: int = 1024, stream_mib: int = 64, repeats: int = 3) -> Target:
    """This machine: peaks measured now (`roofline.measure_peaks`, the throughput study's
    measurement), memory the available memory now."""
    import jax

    peaks = roofline.measure_peaks(matmul_size=matmul_size, stream_mib=stream_mib,
                                   repeats=repeats)
    memory = available_memory() * LOCAL_MEMORY_FRACTION
    return Target(f"this machine ({jax.devices()[0].device_kind}; measured peaks "
                  f"{peaks.flops_per_s / 1e9:.1f} GFLOP/s, {peaks.bytes_per_s / 1e9:.1f} GB/s; "
                  f"{LOCAL_MEMORY_FRACTION:.0%} of the {available_memory() / 2**30:.1f} GiB "
                  "available)", peaks, memory)


def device_target(name: str | None, peak_flops: float | None = None,
                  bandwidth: float | None = None, memory: float | None = None) -> Target:
    """A `DEVICES` entry, its peaks replaced by any of ``peak_flops``/``bandwidth``/``memory``
    given; or, without a name, a device made of those three (all needed)."""
    if name is not None:
        if name not in DEVICES:
            raise ValueError(f"Unknown device {name!r}; accepted: {', '.join(DEVICES)}.")
        d = DEVICES[name]
        flops = peak_flops or d.flops_per_s
        bytes_ = bandwidth or d.bytes_per_s
        mem = memory or d.memory_bytes
        text = (f"{d.name}: {mem / 1e9:.0f} GB ({DEVICE_MEMORY_FRACTION:.0%} usable by JAX's "
                f"default preallocation), {bytes_ / 1e12:.2f} TB/s; {flops / _T:.1f} TFLOP/s "
                f"used for the bound (dense TF32 tensor cores; FP32 {d.fp32_flops_per_s / _T:g}, "
                f"BF16 dense {d.bf16_flops_per_s / _T:g}); source: {d.source}")
        if peak_flops or bandwidth or memory:
            text += "; overridden on the command line"
    else:
        if not (peak_flops and bandwidth):
            raise ValueError("A device without a name needs --peak-flops and --bandwidth "
                             f"(or --device, one of {', '.join(DEVICES)}).")
        flops, bytes_ = peak_flops, bandwidth
        mem = memory or math.inf
        text = (f"a device of {flops / _T:g} TFLOP/s and {bytes_ / 1e12:g} TB/s (given), "
                + ("memory unlimited" if mem == math.inf else f"{mem / 1e9:g} GB"))
    for label, value in (("peak FLOP/s", flops), ("bandwidth", bytes_), ("memory", mem)):
        if not value > 0:
            raise ValueError(f"The {label} must be positive, got {value!r}.")
    usable = mem * DEVICE_MEMORY_FRACTION if name is not None or memory else mem
    return Target(text, roofline.Peaks(flops, bytes_, 0, 0), usable)


def available_memory() -> int:
    """This machine's available memory now, bytes (``MemAvailable`` of ``/proc/meminfo``)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


# --------------------------------------------------------------------------------------------
# The accelerator's code path


@contextlib.contextmanager
def accelerator_path(backend: str | None = "gpu") -> Iterator[None]:
    """Trace programs as on ``backend`` (`models._engine.assume_backend`); None: as here."""
    if backend is None:
        yield
        return
    from linrnn_bench import models

    with models.assume_backend(backend):
        yield
