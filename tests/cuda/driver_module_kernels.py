"""Sim implementations of the kernels the driver-API tests load
(tests/cuda/driver_module_kernels.cu, driver_parity_kernels.cu,
driver_link_*.cu, the NVRTC source in driver_nvrtc.cu, driver_mixed.cu's)."""
import numpy as np


def scale(launch):
    """scale(float *x, float factor, int n)."""
    x, factor, n = launch.param(0, "Q"), launch.param(1, "f"), launch.param(2, "i")
    launch.array(x, np.float32, n)[:] *= np.float32(factor)


def add_bias(launch):
    """add_bias(float *x, double bias, int n)."""
    x, bias, n = launch.param(0, "Q"), launch.param(1, "d"), launch.param(2, "i")
    launch.array(x, np.float32, n)[:] += np.float32(bias)


def bump_counter(launch):
    """bump_counter(int by): the module's __device__ int counter += by."""
    launch.array(launch.symbol("counter"), np.int32, 1)[0] += launch.param(0, "i")


def apply_twice(launch):
    """apply_twice(float *x, int n): x[i] = twice(x[i]), twice from the other linked PTX."""
    x, n = launch.param(0, "Q"), launch.param(1, "i")
    launch.array(x, np.float32, n)[:] *= 2


def nvrtc_iota(launch):
    """nvrtc_iota(int *x, int base, int n): x[i] = base + i."""
    x, base, n = launch.param(0, "Q"), launch.param(1, "i"), launch.param(2, "i")
    launch.array(x, np.int32, n)[:] = base + np.arange(n, dtype=np.int32)


def increment(launch):
    """increment(int *x, int n) (a <<<>>> kernel of driver_mixed.cu)."""
    x, n = launch.param(0, "Q"), launch.param(1, "i")
    launch.array(x, np.int32, n)[:] += 1


def double_all(launch):
    """double_all(int *x, int n) (driver_mixed.cu's PTX, launched by cuLaunchKernel)."""
    x, n = launch.param(0, "Q"), launch.param(1, "i")
    launch.array(x, np.int32, n)[:] *= 2


def add_managed(launch):
    """add_managed(int by): the library's __managed__ int managed_total += by + plain_value - 3."""
    plain = int(launch.array(launch.symbol("plain_value"), np.int32, 1)[0])
    launch.array(launch.symbol("managed_total"), np.int32, 1)[0] += launch.param(0, "i") + plain - 3


def mixed_params(launch):
    """mixed_params(char c, double d, short s, int *out): *out = c + (int)d + s."""
    c, d, s, out = launch.param(0, "b"), launch.param(1, "d"), launch.param(2, "h"), launch.param(3, "Q")
    launch.array(out, np.int32, 1)[0] = c + int(d) + s


def spin(launch):
    """spin(long long nanoseconds): nothing to compute; its time is modelled (COSTS)."""


KERNELS = {"scale": scale, "add_bias": add_bias, "bump_counter": bump_counter, "apply_twice": apply_twice,
           "nvrtc_iota": nvrtc_iota, "increment": increment, "double_all": double_all,
           "add_managed": add_managed, "mixed_params": mixed_params, "spin": spin}
COSTS = {"spin": lambda launch: launch.param(0, "q") / 1e9}
