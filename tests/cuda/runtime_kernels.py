"""Sim implementations of the kernels of tests/cuda/runtime_*.cu.

Each does, with numpy, what the CUDA kernel does for the launched grid.
"""
import os

import numpy as np


def threads(launch, axis=0):
    return launch.grid[axis] * launch.block[axis]


def fill_kernel(launch):
    out, value, n = launch.param(0, "Q"), launch.param(1, "i"), launch.param(2, "i")
    launch.array(out, np.int32, min(n, threads(launch)))[:] = value


def add_kernel(launch):
    out, value, n = launch.param(0, "Q"), launch.param(1, "i"), launch.param(2, "i")
    launch.array(out, np.int32, min(n, threads(launch)))[:] += value


def sleep_kernel(launch):
    pass  # its time is modelled: COSTS below


def out_of_bounds(launch):
    x = launch.param(0, "Q")
    launch.array(x + (1 << 20) * 4, np.int32, 1)[0] = 1  # x[1 << 20]: far past any allocation


def print_kernel(launch):
    print(f"device says {launch.param(0, 'i')}")


def mark_kernel(launch):
    """Appends its tag to $RCUDA_TEST_MARKS (set in the server's environment):
    evidence on the server side that the launch happened."""
    with open(os.environ["RCUDA_TEST_MARKS"], "a") as f:
        f.write(f"{launch.param(0, 'i')}\n")


def scale_by_const(launch):
    """x[i] *= coeffs[i % 4], coeffs a __constant__ float[4]."""
    x, n = launch.param(0, "Q"), launch.param(1, "i")
    n = min(n, threads(launch))
    coeffs = launch.array(launch.symbol("coeffs"), np.float32, 4)
    launch.array(x, np.float32, n)[:] *= coeffs[np.arange(n) % 4]


def read_counter(launch):
    """out[0] = counter; out[1] = ns::nsvar[1]."""
    out = launch.array(launch.param(0, "Q"), np.int32, 2)
    out[0] = launch.array(launch.symbol("counter"), np.int32, 1)[0]
    out[1] = launch.array(launch.symbol("ns::nsvar"), np.int32, 2)[1]


def inc_table(launch):
    t, n = launch.param(0, "Q"), launch.param(1, "i")
    launch.array(t, np.float32, min(n, threads(launch)))[:] += 1.0


def dynamic_shared(launch):
    out = launch.array(launch.param(0, "Q"), np.int32, 1)
    out[0] = launch.shared_mem


def bounded(launch):
    n = launch.block[0]
    launch.array(launch.param(0, "Q"), np.int32, n)[:] = np.arange(n)[::-1]


def transpose_add(launch):
    """2-D: out[y * pitch/4 + x] += 1 over a width x height grid of floats."""
    out, pitch, width, height = (launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "i"),
                                 launch.param(3, "i"))
    rows = launch.array(out, np.uint8, pitch * (height - 1) + width * 4)
    for y in range(height):
        row = rows[y * pitch:y * pitch + width * 4].view(np.float32)
        row += 1.0


KERNELS = {
    "fillKernel": fill_kernel,
    "addKernel": add_kernel,
    "sleepKernel": sleep_kernel,
    "outOfBounds": out_of_bounds,
    "printKernel": print_kernel,
    "markKernel": mark_kernel,
    "scaleByConst": scale_by_const,
    "readCounter": read_counter,
    "incTable": inc_table,
    "dynamicShared": dynamic_shared,
    "bounded": bounded,
    "pitchedAdd": transpose_add,
}

COSTS = {
    "sleepKernel": lambda launch: launch.param(0, "i") / 1000.0,
}
