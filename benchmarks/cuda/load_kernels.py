"""Sim implementations of the load benchmark's kernels (benchmarks/cuda/load_mix.cu)."""
import numpy as np


def _count(launch, n: int) -> int:
    (gx, gy, gz), (bx, by, bz) = launch.grid, launch.block
    return min(n, gx * gy * gz * bx * by * bz)


def axpb(launch):
    x, a, b, n = launch.param(0, "Q"), launch.param(1, "f"), launch.param(2, "f"), launch.param(3, "i")
    view = launch.array(x, np.float32, _count(launch, n))
    view[:] = np.float32(a) * view + np.float32(b)


def add(launch):
    x, y, z, n = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "Q"), launch.param(3, "i")
    n = _count(launch, n)
    launch.array(z, np.float32, n)[:] = launch.array(x, np.float32, n) + launch.array(y, np.float32, n)


KERNELS = {"axpb": axpb, "add": add}
