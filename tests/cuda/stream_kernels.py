"""Sim implementations of the kernels of tests/cuda/independent_streams.cu."""
import numpy as np


def long_kernel(launch):
    """longKernel(int *flag, long long nanoseconds): its time is modelled (COSTS)."""
    launch.array(launch.param(0, "Q"), np.int32, 1)[0] = 42


def add_one(launch):
    """addOne(const int *in, int *out)."""
    launch.array(launch.param(1, "Q"), np.int32, 1)[0] = launch.array(launch.param(0, "Q"), np.int32, 1)[0] + 1


KERNELS = {"longKernel": long_kernel, "addOne": add_one}
COSTS = {"longKernel": lambda launch: launch.param(1, "q") / 1e9}
