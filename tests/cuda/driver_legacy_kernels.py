"""Sim implementation of tests/cuda/driver_legacy_kernels.ptx's kernels:
the launch report the pre-CUDA-4 launch API is checked with, and kernels
reading the module's texture and surface references by name
(launch.texref, launch.surfref)."""
import struct

import numpy as np

#: CU_TR_ADDRESS_MODE_WRAP, CLAMP; CU_TR_FILTER_MODE_POINT.
WRAP, CLAMP, POINT = 0, 1, 0


def legacy_report(launch):
    """out[0..11]: the grid, the block, the dynamic shared memory and the
    parameters, as the kernel saw them; out[12] += the number of blocks."""
    out = launch.array(launch.param(0, "Q"), np.uint32, 13)
    words = struct.unpack("<4I", launch.params[3])
    out[:12] = [launch.grid[0], launch.grid[1], *launch.block, launch.shared_mem, launch.param(1, "I"),
                launch.param(2, "I"), *words]
    out[12] += launch.grid[0] * launch.grid[1] * launch.grid[2]


def fetch_linear(launch):
    """out[i] = tex1Dfetch(texLinear, i + offset) for i < n (0 outside the texels)."""
    tex = launch.texref("texLinear")
    assert tex.resource == "linear", tex.resource
    n, offset = launch.param(1, "i"), launch.param(2, "i")
    n = min(n, launch.grid[0] * launch.block[0])
    index = np.arange(n) + offset
    inside = (index >= 0) & (index < tex.data.shape[0])
    out = launch.array(launch.param(0, "Q"), np.float32, n)
    out[:] = np.where(inside, tex.data[np.clip(index, 0, tex.data.shape[0] - 1)], 0)


def _texel_index(coordinate, size: int, mode: int) -> np.ndarray:
    """The texel a point-filtered texture reads at unnormalised `coordinate`."""
    index = np.floor(coordinate).astype(np.int64)
    return np.clip(index, 0, size - 1) if mode == CLAMP else np.mod(index, size)


def sample_image(launch):
    """out[y * width + x] = tex2D(texImage, x + 0.5, y + 0.5): point
    sampling of unnormalised coordinates, as the program binds it."""
    tex = launch.texref("texImage")
    desc = tex.desc
    assert tex.resource == "array" and desc["filterMode"] == POINT and not desc["normalizedCoords"], desc
    width, height = launch.param(1, "i"), launch.param(2, "i")
    ys, xs = np.mgrid[0:height, 0:width]
    rows, columns = tex.data.shape
    sampled = tex.data[_texel_index(ys + 0.5, rows, desc["addressMode"][1]),
                       _texel_index(xs + 0.5, columns, desc["addressMode"][0])]
    launch.array(launch.param(0, "Q"), np.float32, (height, width))[:] = sampled


def write_surface(launch):
    """surf2Dwrite(x + 1000 * y, surfImage, x * 4, y) for x < width, y < height."""
    surf = launch.surfref("surfImage")
    width, height = launch.param(0, "i"), launch.param(1, "i")
    ys, xs = np.mgrid[0:height, 0:width]
    surf.data[:height, :width] = xs + 1000 * ys


KERNELS = {"legacyReport": legacy_report, "fetchLinear": fetch_linear, "sampleImage": sample_image,
           "writeSurface": write_surface}
