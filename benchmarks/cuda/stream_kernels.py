"""Sim kernels of benchmarks/cuda/streams.cu: the busy kernel's time is
modelled (COSTS); addOneBytes and fillBytes compute."""
import numpy as np


def busy(launch):
    pass


def add_one_bytes(launch):
    src, dst, n = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "q")
    launch.array(dst, np.uint8, n)[:] = launch.array(src, np.uint8, n) + np.uint8(1)


def fill_bytes(launch):
    dst, n, value = launch.param(0, "Q"), launch.param(1, "q"), launch.param(2, "i")
    launch.array(dst, np.uint8, n)[:] = np.uint8(value)


KERNELS = {"busyKernel": busy, "addOneBytes": add_one_bytes, "fillBytes": fill_bytes}
COSTS = {"busyKernel": lambda launch: launch.param(0, "q") / 1e9}
