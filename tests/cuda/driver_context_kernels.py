"""Sim implementations of the kernels of tests/cuda/driver_contexts.cu."""
import numpy as np


def add_value(launch):
    """addValue(int *data, int value, int n): data[i] += value for i < n."""
    n = launch.param(2, "i")
    threads = launch.grid[0] * launch.block[0]
    data = launch.array(launch.param(0, "Q"), np.int32, min(n, threads))
    data += launch.param(1, "i")


KERNELS = {"addValue": add_value}
