"""Sim implementations of the kernels of tests/cuda/graphs.cu."""
import numpy as np


def scale(launch):
    """scale(float *x, float factor, int n): x[i] *= factor."""
    n = launch.param(2, "i")
    x = launch.array(launch.param(0, "Q"), np.float32, n)
    x *= np.float32(launch.param(1, "f"))


def axpy(launch):
    """axpy(const float *x, float *y, float a, int n): y[i] += a * x[i]."""
    n = launch.param(3, "i")
    x = launch.array(launch.param(0, "Q"), np.float32, n)
    y = launch.array(launch.param(1, "Q"), np.float32, n)
    y += np.float32(launch.param(2, "f")) * x


def bump(launch):
    """bump(int *counter): counter[0] += 1 (one thread)."""
    launch.array(launch.param(0, "Q"), np.int32, 1)[0] += 1


def tiny(launch):
    """tiny(int *slot, int value): slot[0] = value."""
    launch.array(launch.param(0, "Q"), np.int32, 1)[0] = launch.param(1, "i")


KERNELS = {"scale": scale, "axpy": axpy, "bump": bump, "tiny": tiny}
