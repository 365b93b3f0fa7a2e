"""Sim kernels of benchmarks/cuda/streams.cu: the busy kernel's time is
modelled (COSTS); addOneBytes computes."""
import numpy as np


def busy(launch):
    pass


def add_one_bytes(launch):
    src, dst, n = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "q")
    launch.array(dst, np.uint8, n)[:] = launch.array(src, np.uint8, n) + np.uint8(1)


KERNELS = {"busyKernel": busy, "addOneBytes": add_one_bytes}
COSTS = {"busyKernel": lambda launch: launch.param(0, "q") / 1e9}
