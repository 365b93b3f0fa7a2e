"""Sim implementations of the kernels of tests/cuda/large_params.cu: each
checks every byte of its large parameter against the pattern made from the
seed in its first four bytes, as the CUDA kernel does, and writes a Result
{bad, seed, sum, extra}."""
import numpy as np

RESULT = np.dtype([("bad", "<u4"), ("seed", "<u4"), ("sum", "<u4"), ("extra", "<u4")])


def pattern(seed: int, count: int) -> np.ndarray:
    """pattern(seed, i) of the program for i < count."""
    i = np.arange(count, dtype=np.uint64)
    return (((i * 2654435761 + seed) & 0xFFFFFFFF) >> 13).astype(np.uint8)


def check_bytes(launch, param: bytes, out: int, extra: int) -> None:
    seed = int.from_bytes(param[:4], "little")
    data = np.frombuffer(param, np.uint8)[4:]
    result = launch.array(out, RESULT, 1)
    result["bad"] = int(np.count_nonzero(data != pattern(seed, data.size)))
    result["seed"] = seed
    result["sum"] = int(data.sum(dtype=np.uint64)) & 0xFFFFFFFF
    result["extra"] = extra


def big_kernel(launch):
    """bigKernel(const __grid_constant__ Big /*32000 B*/, Result *out)."""
    check_bytes(launch, launch.params[0], launch.param(1, "Q"), 0)


def max_kernel(launch):
    """maxKernel(const __grid_constant__ Max /*32752 B*/, Result *out, unsigned tail): 32,764 bytes."""
    check_bytes(launch, launch.params[0], launch.param(1, "Q"), launch.param(2, "I"))


def mid_kernel(launch):
    """midKernel(char c, Mid /*16000 B*/, short s, Result *out)."""
    c, s = launch.param(0, "B"), launch.param(2, "H")
    check_bytes(launch, launch.params[1], launch.param(3, "Q"), c << 16 | s)


KERNELS = {"bigKernel": big_kernel, "maxKernel": max_kernel, "midKernel": mid_kernel}
