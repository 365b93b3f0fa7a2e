"""Sim implementation of tests/cuda/driver_arrays.cu's kernels: point
sampling of unnormalised coordinates, as the program uses it."""
import numpy as np

#: cudaAddressModeClamp, cudaFilterModePoint.
CLAMP, POINT = 1, 0


def _texel_index(coordinate, size: int, mode: int) -> np.ndarray:
    """The texel a point-filtered texture reads at unnormalised `coordinate`."""
    index = np.floor(coordinate).astype(np.int64)
    if mode == CLAMP:
        return np.clip(index, 0, size - 1)
    return np.mod(index, size)  # wrap


def shift_and_double(launch):
    """surf(x, y) = 2 * tex2D(tex, x + 1.5, y + 0.5) for x < width, y < height."""
    tex, surf = launch.texture(0), launch.surface(1)
    width, height = launch.param(2, "i"), launch.param(3, "i")
    desc = tex.desc
    assert desc["filterMode"] == POINT and not desc["normalizedCoords"], desc
    ys, xs = np.mgrid[0:height, 0:width]
    rows, columns = tex.data.shape
    sampled = tex.data[_texel_index(ys + 0.5, rows, desc["addressMode"][1]),
                       _texel_index(xs + 1.5, columns, desc["addressMode"][0])]
    surf.data[:height, :width] = 2.0 * sampled


def fetch_plus_one(launch):
    """out[i] = tex1Dfetch<int>(tex, i) + 1 for i < n."""
    texels = launch.texture(0).data
    n = min(launch.param(2, "i"), launch.grid[0] * launch.block[0])
    out = launch.array(launch.param(1, "Q"), np.int32, n)
    out[:] = texels[:n] + 1


KERNELS = {"shiftAndDouble": shift_and_double, "fetchPlusOne": fetch_plus_one}
