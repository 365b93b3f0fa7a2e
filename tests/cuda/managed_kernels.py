"""Sim implementations of the kernels of tests/cuda/managed_memory.cu: they
read and write managed memory through the pointers the program passes, and
its __managed__ variables by name."""
import numpy as np


def vector_add(launch):
    """vectorAdd(const float *a, const float *b, float *c, int n)."""
    a, b, c, n = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "Q"), launch.param(3, "i")
    launch.array(c, np.float32, n)[:] = launch.array(a, np.float32, n) + launch.array(b, np.float32, n)


def add_one(launch):
    """addOne(int *p, int n)."""
    launch.array(launch.param(0, "Q"), np.int32, launch.param(1, "i"))[:] += 1


def accumulate(launch):
    """accumulate(const int *x, int *y, int n): y += x."""
    n = launch.param(2, "i")
    launch.array(launch.param(1, "Q"), np.int32, n)[:] += launch.array(launch.param(0, "Q"), np.int32, n)


def add_one_each(launch):
    """addOneEach(int **ptrs, int n): *ptrs[i] += 1."""
    for ptr in launch.array(launch.param(0, "Q"), np.uint64, launch.param(1, "i")):
        launch.array(int(ptr), np.int32, 1)[0] += 1


def bump_globals(launch):
    """bumpGlobals(float scale): counter += 1; table[i] = i * scale."""
    launch.array(launch.symbol("counter"), np.int32, 1)[0] += 1
    launch.array(launch.symbol("table"), np.float32, 16)[:] = np.arange(16, dtype=np.float32) * launch.param(0, "f")


def fill(launch):
    """fill(unsigned *p, size_t n, unsigned seed): p[i] = i * 7 + seed."""
    n, seed = launch.param(1, "Q"), launch.param(2, "I")
    words = launch.array(launch.param(0, "Q"), np.uint32, n)
    np.multiply(np.arange(n, dtype=np.uint32), np.uint32(7), out=words)
    words += np.uint32(seed)


def long_kernel(launch):
    """longKernel(int *flag, long long nanoseconds): *flag = 42 (its time is modelled: COSTS)."""
    launch.array(launch.param(0, "Q"), np.int32, 1)[0] = 42


def system_add(launch):
    """systemAdd(int *p): each thread adds 10."""
    grid, block = np.prod(launch.grid), np.prod(launch.block)
    launch.array(launch.param(0, "Q"), np.int32, 1)[0] += 10 * int(grid * block)


KERNELS = {"vectorAdd": vector_add, "addOne": add_one, "addOneEach": add_one_each, "accumulate": accumulate, "bumpGlobals": bump_globals,
           "fill": fill, "longKernel": long_kernel, "systemAdd": system_add}
COSTS = {"longKernel": lambda launch: launch.param(1, "q") / 1e9, "systemAdd": lambda launch: 0.2}
