"""Sim implementation of tests/cuda/stream_attributes.cu's kernel."""
import numpy as np


def touch(launch):
    """touch(int *data, int n, int *big, int bigN): every element of both
    buffers goes up by one (the access policy window changes nothing a
    program can see but speed)."""
    data, n, big, big_n = launch.param(0, "Q"), launch.param(1, "i"), launch.param(2, "Q"), launch.param(3, "i")
    launch.array(data, np.int32, n)[:] += 1
    launch.array(big, np.int32, big_n)[:] += 1


KERNELS = {"touch": touch}
