"""Sim implementations of the test programs' kernels (tests/cuda/*.cu).

Each function does, with numpy, what the CUDA kernel does for every thread
of the launch's grid (threads beyond the grid are not run; guards like
`if (i < n)` become slices).
"""
import struct

import numpy as np


def threads(launch, axis=0):
    return launch.grid[axis] * launch.block[axis]


def vector_add(launch):
    a, b, c, n = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "Q"), launch.param(3, "i")
    n = min(n, threads(launch))
    launch.array(c, np.float32, n)[:] = launch.array(a, np.float32, n) + launch.array(b, np.float32, n)


def scalars(launch):
    out = launch.array(launch.param(0, "Q"), np.float64, 6)
    out[:] = [launch.param(1, "i"), launch.param(2, "f"), launch.param(3, "d"), launch.param(4, "b"),
              launch.param(5, "q"), launch.param(6, "H")]


def with_struct(launch):
    scale, offset, b0, b1, b2 = struct.unpack("di3f", launch.params[0][:24])
    out, n = launch.param(1, "Q"), launch.param(2, "i")
    n = min(n, threads(launch))
    i = np.arange(n)
    bias = np.array([b0, b1, b2], np.float32)[i % 3]
    launch.array(out, np.float32, n)[:] = (i * scale + offset + bias).astype(np.float32)


def fill(dtype, fmt):
    def kernel(launch):
        out, value, n = launch.param(0, "Q"), launch.param(1, fmt), launch.param(2, "i")
        launch.array(out, dtype, min(n, threads(launch)))[:] = value
    return kernel


def square(launch):
    x, n = launch.param(0, "Q"), launch.param(1, "i")
    view = launch.array(x, np.float32, min(n, threads(launch)))
    view *= view


def grid2d(launch):
    out, w, h = launch.param(0, "Q"), launch.param(1, "i"), launch.param(2, "i")
    ww, hh = min(w, threads(launch, 0)), min(h, threads(launch, 1))
    grid = launch.array(out, np.int32, (h, w))
    y, x = np.mgrid[0:hh, 0:ww]
    grid[:hh, :ww] = x + 1000 * y


def grid3d(launch):
    out, w, h, d = (launch.param(i, fmt) for i, fmt in enumerate("Qiii"))
    ww, hh, dd = (min(v, threads(launch, a)) for a, v in enumerate((w, h, d)))
    grid = launch.array(out, np.int32, (d, h, w))
    z, y, x = np.mgrid[0:dd, 0:hh, 0:ww]
    grid[:dd, :hh, :ww] = x + 100 * y + 10000 * z


def no_params(launch):
    pass


def largest(launch):
    """largest(const __grid_constant__ Huge /*32752 B*/, int *out, int n): out[0] = h.v[n]."""
    huge = np.frombuffer(launch.params[0], np.int32)
    launch.array(launch.param(1, "Q"), np.int32, 1)[0] = huge[launch.param(2, "i")]


KERNELS = {
    "vectorAdd": vector_add,
    "scalars": scalars,
    "withStruct": with_struct,
    "_Z4fillIiEvPT_S0_i": fill(np.int32, "i"),  # mangled names work too
    "fill<double>": fill(np.float64, "d"),
    "math::square": square,
    "grid2d": grid2d,
    "grid3d": grid3d,
    "noParams": no_params,
    "largest": largest,
}


def out_of_bounds(launch):
    x, n = launch.param(0, "Q"), launch.param(1, "i")
    launch.array(x, np.float32, threads(launch))[:] = n  # more threads than floats


def failing_assert(launch):
    assert launch.param(0, "i") == 0, "v == 0"


def raises_error(launch):
    raise ValueError("something in the kernel went wrong")


KERNELS.update({
    "outOfBounds": out_of_bounds,
    "failingAssert": failing_assert,
    "raisesError": raises_error,
})


# curand_discrete.h's structs (curand_generators.cu's discrete section reads
# them through cuRAND's device API; rcuda's libcurand lays them out)
DISTRIBUTION = struct.Struct("<QQQddiI")  # self_host_ptr, M2, host_M2, stddev, mean, method, host_gen
M2_SHIFT = struct.Struct("<QQIII")         # histogram, host_histogram, shift, length, host_gen
HISTOGRAM = struct.Struct("<QQQQI")        # V, host_V, K, host_K, host_gen
CURAND_M2 = 5


def discrete_draws(launch):
    """curand_discrete(&philox, distribution) per thread: cuRAND's M2 draw
    (u in (0, 1); j = floor(length u); shift + j if u < V[j], else shift + K[j])
    or, for another method, the rounded normal approximation; the uniforms
    and normals are numpy's, seeded by the kernel's seed."""
    dist, seed, out, n = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "Q"), launch.param(3, "i")
    n = min(n, threads(launch))
    _, m2, _, stddev, mean, method, _ = DISTRIBUTION.unpack(launch.array(dist, np.uint8, DISTRIBUTION.size).tobytes())
    rng = np.random.default_rng(seed)
    target = launch.array(out, np.uint32, n)
    if method != CURAND_M2:
        target[:] = (stddev * rng.standard_normal(n) + mean + 0.5).astype(np.uint32)
        return
    histogram, _, shift, length, _ = M2_SHIFT.unpack(launch.array(m2, np.uint8, M2_SHIFT.size).tobytes())
    v, _, k, _, _ = HISTOGRAM.unpack(launch.array(histogram, np.uint8, HISTOGRAM.size).tobytes())
    table_v, table_k = launch.array(v, np.float64, length), launch.array(k, np.uint32, length)
    u = 1.0 - rng.random(n)  # (0, 1]
    j = np.minimum(np.floor(length * u).astype(np.int64), length - 1)
    target[:] = shift + np.where(u < table_v[j], j, table_k[j])


KERNELS["discrete_draws"] = discrete_draws
