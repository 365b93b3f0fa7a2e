"""Sim kernels of tests/cuda/sync_in_c.cu."""
import numpy as np


def add_one(launch):
    x, n = launch.param(0, "Q"), launch.param(1, "i")
    launch.array(x, np.int32, n)[:] += 1


def say(launch):
    print(f"say {launch.param(0, 'i')}")


def out_of_bounds(launch):
    x, n = launch.param(0, "Q"), launch.param(1, "i")
    launch.array(x, np.float32, launch.block[0])[:] = n  # more threads than floats


KERNELS = {"addOne": add_one, "addPadded": add_one, "say": say, "outOfBounds": out_of_bounds}
