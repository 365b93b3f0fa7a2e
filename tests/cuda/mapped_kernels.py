"""Sim implementations of the kernels of tests/cuda/mapped_memory.cu: they
read and write mapped host memory through the pointers the program passes."""
import numpy as np


def vector_add(launch):
    """vectorAdd(const float *a, const float *b, float *c, int n)."""
    a, b, c, n = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "Q"), launch.param(3, "i")
    launch.array(c, np.float32, n)[:] = launch.array(a, np.float32, n) + launch.array(b, np.float32, n)


def checksum_and_bump(launch):
    """checksumAndBump(unsigned *data, size_t n, unsigned long long *sum, unsigned round)."""
    data, n, total, rnd = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "Q"), launch.param(3, "I")
    words = launch.array(data, np.uint32, n)
    launch.array(total, np.uint64, 1)[0] += words.sum(dtype=np.uint64)
    words *= np.uint32(3)
    words += np.uint32(rnd)


def copy_ints(launch):
    """copyInts(const int *in, int *out, int n)."""
    n = launch.param(2, "i")
    launch.array(launch.param(1, "Q"), np.int32, n)[:] = launch.array(launch.param(0, "Q"), np.int32, n)


def add_one(launch):
    """addOne(int *p, int n)."""
    launch.array(launch.param(0, "Q"), np.int32, launch.param(1, "i"))[:] += 1


def long_kernel(launch):
    """longKernel(int *flag, long long nanoseconds): its time is modelled (COSTS)."""
    launch.array(launch.param(0, "Q"), np.int32, 1)[0] = 42


KERNELS = {"vectorAdd": vector_add, "checksumAndBump": checksum_and_bump, "copyInts": copy_ints,
           "addOne": add_one, "longKernel": long_kernel}
COSTS = {"longKernel": lambda launch: launch.param(1, "q") / 1e9}
