"""Sim implementation of tests/cuda/driver_memory.cu's kernel."""
import numpy as np


def add_words(launch):
    """p[i] += value for i < n (unsigned, wrapping)."""
    p, value, n = launch.param(0, "Q"), launch.param(1, "I"), launch.param(2, "i")
    n = min(n, launch.grid[0] * launch.block[0])
    words = launch.array(p, np.uint32, n)
    words += np.uint32(value)


KERNELS = {"addWords": add_words}
