"""Sim implementations of the multi-GPU test programs' kernels
(tests/cuda/multi_gpu.cu, peer_ring.cu, parallel.cu, survivor.cu).

As in sim_kernels.py, each function does with numpy what the CUDA kernel does
for every thread of the launch's grid.
"""
import numpy as np


def total_threads(launch):
    return launch.grid[0] * launch.block[0]


def reduce_kernel(launch):
    """reduceKernel(float *out, const float *in, int n): thread t sums
    in[t], in[t + T], ... (T threads in all); block b writes the sum of its
    threads to out[b]."""
    out, data, n = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "i")
    blocks, threads = launch.grid[0], launch.block[0]
    stride = blocks * threads
    values = np.zeros(-(-n // stride) * stride, np.float64)
    values[:n] = launch.array(data, np.float32, n)
    per_thread = values.reshape(-1, stride).sum(axis=0)
    launch.array(out, np.float32, blocks)[:] = per_thread.reshape(blocks, threads).sum(axis=1)


def add_one(launch):
    """addOne(unsigned char *x, size_t n): x[i] += 1 for every i < n the grid covers."""
    x, n = launch.param(0, "Q"), launch.param(1, "Q")
    view = launch.array(x, np.uint8, min(n, total_threads(launch)))
    view += np.uint8(1)


def spin(launch):
    """spin(int *counter, int micros): counts its launches; COSTS below makes
    it take `micros` of modelled GPU time."""
    launch.array(launch.param(0, "Q"), np.int32, 1)[0] += 1


KERNELS = {"reduceKernel": reduce_kernel, "addOne": add_one, "spin": spin}

COSTS = {"spin": lambda launch: launch.param(1, "i") / 1e6}


def pattern(launch):
    """pattern(unsigned char *x, size_t n, int seed): x[i] = i*7 + seed + (i >> 12)."""
    x, n, seed = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "i")
    n = min(n, total_threads(launch))
    out = launch.array(x, np.uint8, n)
    step = 1 << 24  # in slices: a 256 MiB buffer must not need gigabytes of temporaries
    for start in range(0, n, step):
        i = np.arange(start, min(start + step, n), dtype=np.uint32)  # wraps mod 2**32: the low byte is right
        out[start:start + len(i)] = (i * np.uint32(7) + np.uint32(seed & 0xFF) + (i >> np.uint32(12))).astype(np.uint8)


KERNELS["pattern"] = pattern
