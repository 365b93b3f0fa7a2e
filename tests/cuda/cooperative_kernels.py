"""Sim implementations of the kernels of tests/cuda/cooperative.cu.  A
kernel whose blocks synchronise across the grid is computed whole: both
phases at once, as the sim runs every launch."""
import numpy as np


def sum_others(launch):
    """sumOthers(const int *in, int *partial, int *out, int n): partial[b]
    is block b's grid-stride share of `in`; out[i] = sum(in) - in[i]."""
    src, partial, out, n = (launch.param(i, f) for i, f in enumerate("QQQi"))
    blocks, threads = launch.grid[0], launch.grid[0] * launch.block[0]
    values = launch.array(src, np.int32, n)
    owner = (np.arange(n) % threads) // launch.block[0]  # the block whose thread i % threads is
    launch.array(partial, np.int32, blocks)[:] = np.bincount(owner, weights=values, minlength=blocks).astype(np.int32)
    launch.array(out, np.int32, n)[:] = values.sum(dtype=np.int64) - values


def fill(launch):
    """fill(int *out, int value, int n)."""
    out, value, n = launch.param(0, "Q"), launch.param(1, "i"), launch.param(2, "i")
    launch.array(out, np.int32, min(n, launch.grid[0] * launch.block[0]))[:] = value


KERNELS = {"sumOthers": sum_others, "fill": fill}
