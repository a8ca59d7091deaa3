"""Named GPU profiles for the roofline model: the few numbers of a data sheet that bound a kernel.

Sources: NVIDIA's A100 and H100 whitepapers and the H200 product brief (SXM parts; dense fp16
tensor throughput, fp16 on CUDA cores, DRAM bandwidth, SM count, largest shared memory per block).
Shared-memory bandwidth is 128 bytes per clock per SM at the boost clock. L2 bandwidth is not on a
data sheet: the values are the round figures microbenchmarks report (about 2.5x DRAM on A100, 3x
on H100). Launch overhead is the typical gap between two dependent kernels launched from a stream
(a few microseconds), not a hardware limit; it is what kernel fusion saves.
"""

from __future__ import annotations

from dataclasses import dataclass

from mugraph.ir.errors import MugraphError


@dataclass(frozen=True, slots=True)
class GpuProfile:
    name: str
    description: str
    dram_bytes_per_s: float
    l2_bytes_per_s: float
    smem_bytes_per_s: float  # all SMs together
    tensor_flops: float  # dense fp16 on tensor cores
    simt_flops: float  # fp16 on CUDA cores (element-wise work, and matmuls that cannot use tensor cores)
    sms: int
    smem_per_block: int  # the largest shared memory one block may allocate
    launch_seconds: float
    # One SM with pipelined copies can draw more than its even share of DRAM bandwidth, so a grid
    # with fewer blocks than SMs still saturates DRAM when blocks x share >= SMs.
    dram_share_per_sm: float = 2.5


PROFILES: dict[str, GpuProfile] = {
    p.name: p
    for p in (
        GpuProfile(
            "A100",
            "NVIDIA A100 SXM4 80GB",
            dram_bytes_per_s=2.039e12,
            l2_bytes_per_s=5.1e12,
            smem_bytes_per_s=108 * 128 * 1.41e9,
            tensor_flops=312e12,
            simt_flops=78e12,
            sms=108,
            smem_per_block=163 * 1024,
            launch_seconds=4e-6,
        ),
        GpuProfile(
            "H100",
            "NVIDIA H100 SXM5 80GB",
            dram_bytes_per_s=3.35e12,
            l2_bytes_per_s=10e12,
            smem_bytes_per_s=132 * 128 * 1.83e9,
            tensor_flops=989e12,
            simt_flops=134e12,
            sms=132,
            smem_per_block=227 * 1024,
            launch_seconds=3e-6,
        ),
        GpuProfile(
            "H200",
            "NVIDIA H200 SXM 141GB",
            dram_bytes_per_s=4.8e12,
            l2_bytes_per_s=10e12,
            smem_bytes_per_s=132 * 128 * 1.83e9,
            tensor_flops=989e12,
            simt_flops=134e12,
            sms=132,
            smem_per_block=227 * 1024,
            launch_seconds=3e-6,
        ),
    )
}
DEFAULT_PROFILE = "H100"


def get_profile(name: str) -> GpuProfile:
    """The profile called `name` (case-insensitive); an unknown name lists the known ones."""
    for key, profile in PROFILES.items():
        if key.lower() == str(name).strip().lower():
            return profile
    raise MugraphError(f"unknown GPU profile {name!r}; known profiles are: {', '.join(PROFILES)}")
