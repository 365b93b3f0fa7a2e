"""Sim implementation of tests/cuda/peer_topology.cu's kernel.  The source
may be another GPU's memory: launch.array reaches it only while the
launching GPU has peer access to that GPU."""
import numpy as np


def scale_by_two(launch):
    """scaleByTwo(const float *src, float *dst, int n): dst[i] = 2 * src[i]."""
    src, dst, n = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "i")
    launch.array(dst, np.float32, n)[:] = 2 * launch.array(src, np.float32, n)


KERNELS = {"scaleByTwo": scale_by_two}
