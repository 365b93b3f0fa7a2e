"""The texture sampler of the sim kernel plugin tests/cuda/texture_kernels.py
against values worked out by hand from CUDA's definition of texture fetching,
and its kernels run on a stand-in for the sim's `launch` object (pure Python,
no server).  tests/test_textures.py runs the same kernels under rcuda."""
from __future__ import annotations

import importlib.util
import re
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

CUDA = Path(__file__).resolve().parent / "cuda"


def _load():
    spec = importlib.util.spec_from_file_location("texture_kernels_under_test", CUDA / "texture_kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tk = _load()
WRAP, CLAMP, MIRROR, BORDER = tk.WRAP, tk.CLAMP, tk.MIRROR, tk.BORDER


def desc(mode=CLAMP, linear=False, normalized=False, read=tk.ELEMENT_TYPE, border=(0.0, 0.0, 0.0, 0.0), **extra):
    modes = mode if isinstance(mode, tuple) else (mode, mode, mode)
    d = {"addressMode": modes, "filterMode": tk.LINEAR if linear else tk.POINT, "readMode": read, "sRGB": 0,
         "borderColor": list(border), "normalizedCoords": int(normalized), "maxAnisotropy": 0,
         "mipmapFilterMode": tk.POINT, "mipmapLevelBias": 0.0, "minMipmapLevelClamp": 0.0,
         "maxMipmapLevelClamp": 0.0, "disableTrilinearOptimization": 0, "seamlessCubemap": 0}
    d.update(extra)
    return d


ROW = np.array([10, 20, 30, 40], np.float32)  # a 1-D texture of 4 texels


def sample1(x, **kw):
    return float(tk.Texels(ROW, 1, desc(**kw)).sample([x]))


# ---------------------------------------------------------------- addressing and point sampling


@pytest.mark.parametrize("i, mode, normalized, want", [
    (-1, CLAMP, False, 0), (4, CLAMP, False, 3), (2, CLAMP, False, 2),
    (-1, BORDER, False, None), (4, BORDER, True, None), (3, BORDER, False, 3),
    (-1, WRAP, True, 3), (5, WRAP, True, 1), (-5, WRAP, True, 3),
    (4, MIRROR, True, 3), (7, MIRROR, True, 0), (8, MIRROR, True, 0), (-1, MIRROR, True, 0), (-2, MIRROR, True, 1),
    (5, WRAP, False, 3), (-3, MIRROR, False, 0),  # unnormalized: wrap and mirror act as clamp
])
def test_address(i, mode, normalized, want):
    assert tk.address(i, 4, mode, normalized) == want


@pytest.mark.parametrize("x, kw, want", [
    (0.5, {}, 10), (3.99, {}, 40), (-1.0, {}, 10), (7.0, {}, 40), (1.0, {}, 20),  # texel floor(x)
    (-0.25, {"mode": BORDER, "border": (5, 0, 0, 0)}, 5), (4.0, {"mode": BORDER, "border": (5, 0, 0, 0)}, 5),
    (3.5, {"mode": BORDER, "border": (5, 0, 0, 0)}, 40),
    (-0.125, {"mode": WRAP, "normalized": True}, 40),   # x = -0.5: texel -1 wraps to 3
    (1.375, {"mode": WRAP, "normalized": True}, 20),    # x = 5.5
    (1.125, {"mode": MIRROR, "normalized": True}, 40),  # x = 4.5: the mirror image of texel 3
    (1.875, {"mode": MIRROR, "normalized": True}, 10),
    (-0.375, {"mode": MIRROR, "normalized": True}, 20),  # x = -1.5: texel -2 mirrors to 1
    (5.5, {"mode": WRAP}, 40),  # unnormalized wrap: clamp
])
def test_point(x, kw, want):
    assert sample1(x, **kw) == want


# ---------------------------------------------------------------- linear filtering


@pytest.mark.parametrize("x, kw, want", [
    (1.0, {}, 15.0),           # half way from texel 0 to texel 1
    (0.25, {}, 10.0),          # texels -1 (clamped to 0) and 0
    (2.75, {}, 32.5),          # 3/4 of 30 + 1/4 of 40
    (0.5, {}, 10.0), (3.5, {}, 40.0),
    (0.25, {"mode": BORDER}, 7.5),                   # 1/4 of the border colour 0 + 3/4 of 10
    (4.25, {"mode": BORDER, "border": (8, 0, 0, 0)}, 0.75 * 8 + 0.25 * 40),
    (0.0, {"mode": WRAP, "normalized": True}, 25.0),  # texels 3 and 0, half and half
    (1.3, {}, 4610 / 256),     # weight 0.8 in 8 fractional bits: 205/256, so not exactly 18
    (1.001, {}, 15.0),         # 0.501 rounds to 128/256
])
def test_linear(x, kw, want):
    assert sample1(x, linear=True, **kw) == pytest.approx(want, abs=1e-9)


def test_weights_have_eight_fractional_bits():
    assert tk.weight8(0.5) == 0.5
    assert tk.weight8(0.8) == 205 / 256
    assert tk.weight8(0.3) == 77 / 256
    assert tk.weight8(0.999) == 1.0  # 9 bits: 1.0 is representable
    assert tk.weight8(0.0019) == 0.0


def test_bilinear():
    grid = np.array([[0, 1, 2], [10, 11, 12]], np.float32)  # [y][x]
    texels = tk.Texels(grid, 2, desc(linear=True))
    assert float(texels.sample([1.0, 1.0])) == 5.5
    assert float(texels.sample([2.0, 0.75])) == pytest.approx(0.75 * 1.5 + 0.25 * 11.5)
    assert float(texels.sample([9.0, -3.0])) == 2.0  # both clamped
    per_axis = tk.Texels(grid, 2, desc(mode=(WRAP, BORDER, BORDER), normalized=True, border=(100, 0, 0, 0)))
    assert float(per_axis.sample([-1 / 6, 0.25])) == 2.0  # x = -0.5 wraps to texel 2; y = 0.5: row 0
    assert float(per_axis.sample([0.5, 1.25])) == 100.0  # row 2 is outside: the border


def test_channels_and_normalized_reads():
    u8 = np.array([[0, 51, 255, 128]], np.uint8)  # one uchar4 texel
    texels = tk.Texels(u8, 1, desc(read=tk.NORMALIZED_FLOAT))
    assert np.array_equal(texels.sample([0.5]), np.float32([0, 0.2, 1.0, 128 / 255]))
    assert texels.sample([0.5]).dtype == np.float32
    s8 = tk.read_values(np.array([-128, -127, 0, 127], np.int8), tk.NORMALIZED_FLOAT)
    assert s8.tolist() == [-1.0, -1.0, 0.0, 1.0]
    s16 = tk.read_values(np.array([-32768, 16384, 32767], np.int16), tk.NORMALIZED_FLOAT)
    assert s16.tolist() == pytest.approx([-1.0, 16384 / 32767, 1.0])
    assert tk.read_values(np.array([65535], np.uint16), tk.NORMALIZED_FLOAT).tolist() == [1.0]
    ints = np.array([7, -3], np.int32)  # 32-bit integers are never normalized
    assert tk.read_values(ints, tk.NORMALIZED_FLOAT) is ints
    assert tk.read_values(np.array([1.5], np.float16), tk.ELEMENT_TYPE).dtype == np.float32
    # Linear filtering of normalized bytes blends the floats.
    two = tk.Texels(np.array([0, 255], np.uint8), 1, desc(linear=True, read=tk.NORMALIZED_FLOAT))
    assert float(two.sample([1.0])) == pytest.approx(0.5)
    # Integer border colours are the bits of the floats.
    border = tk.Texels(np.array([1, 2], np.int32), 1, desc(mode=BORDER, border=(1.0, 0, 0, 0)))
    assert int(border.sample([-1.0])) == 0x3F800000
    four = tk.Texels(np.zeros((1, 2, 4), np.float32), 2, desc(mode=BORDER, border=(1, 2, 3, 4)))
    assert four.sample([5.0, 0.5]).tolist() == [1, 2, 3, 4]


# ---------------------------------------------------------------- cubemaps, levels, fetches


@pytest.mark.parametrize("direction, face, s, t", [
    ((1, 0, 0), 0, 0.5, 0.5), ((-2, 0, 0), 1, 0.5, 0.5), ((0, 3, 0), 2, 0.5, 0.5), ((0, -1, 0), 3, 0.5, 0.5),
    ((0, 0, 1), 4, 0.5, 0.5), ((0, 0, -0.5), 5, 0.5, 0.5),
    ((1, 0.5, 0.2), 0, 0.4, 0.25),      # +x: s = -z, t = -y
    ((-1, -0.6, 0.5), 1, 0.75, 0.8),    # -x: s = z, t = -y
    ((0.2, 1, -0.6), 2, 0.6, 0.2),      # +y: s = x, t = z
    ((0.7, -1, 0.1), 3, 0.85, 0.45),    # -y: s = x, t = -z
    ((-0.5, 0.5, 1), 4, 0.25, 0.25),    # +z: s = x, t = -y
    ((0.5, -0.25, -1), 5, 0.25, 0.625),  # -z: s = -x, t = -y
    ((2, 0, -4), 5, 0.25, 0.5),          # |m| divides
])
def test_cube_faces(direction, face, s, t):
    got_face, got_s, got_t = tk.cube_face(*direction)
    assert (got_face, float(got_s), float(got_t)) == (face, pytest.approx(s), pytest.approx(t))


def test_cubemap_texels():
    # The program's cubemap: 3 x 3 faces, texel (x, y) of face f = 100 f + 10 y + x.
    cube = np.array([[[100 * f + 10 * y + x for x in range(3)] for y in range(3)] for f in range(12)], np.float32)
    faces = [tk.Texels(face, 2, desc(normalized=True)) for face in cube]
    assert float(tk.sample_cube(faces, (1, 0.5, 0.2))) == 1
    assert float(tk.sample_cube(faces, (-1, -0.6, 0.5))) == 122
    assert float(tk.sample_cube(faces, (0.5, -0.25, -1), layer=1)) == 510 + 600
    assert float(tk.sample_cube(faces, (0, 0, 1), layer=5)) == 411 + 600  # the layer is clamped


def mipmapped(**kw):
    levels = [np.full((8 >> n, 16 >> n), 1000.0 * n, np.float32) for n in range(4)]  # 16x8 .. 2x1
    return SimpleNamespace(data=levels[0], levels=levels, resource="mipmappedArray", view=None,
                           desc=desc(normalized=True, **kw))


@pytest.mark.parametrize("lod, kw, level", [
    (2, {"maxMipmapLevelClamp": 3.0}, 2),
    (1.4, {"maxMipmapLevelClamp": 3.0}, 1), (1.6, {"maxMipmapLevelClamp": 3.0}, 2),  # point: the nearest level
    (9, {"maxMipmapLevelClamp": 3.0}, 3), (-2, {"maxMipmapLevelClamp": 3.0}, 0),
    (9, {"maxMipmapLevelClamp": 10.0}, 3),  # no level past the last
    (3, {}, 0),  # maxMipmapLevelClamp 0 (the default) holds every fetch at level 0
    (1, {"maxMipmapLevelClamp": 3.0, "minMipmapLevelClamp": 2.0}, 2),
    (1, {"maxMipmapLevelClamp": 3.0, "mipmapLevelBias": 1.0}, 2),
])
def test_level_of_detail(lod, kw, level):
    assert float(tk.sample_lod(mipmapped(**kw), (0.5, 0.5), lod, 2)) == 1000.0 * level


def test_linear_between_levels_and_views():
    tex = mipmapped(maxMipmapLevelClamp=3.0, mipmapFilterMode=tk.LINEAR)
    assert float(tk.sample_lod(tex, (0.5, 0.5), 1.25, 2)) == 1250.0
    tex.view = {"firstMipmapLevel": 1, "lastMipmapLevel": 3}  # level 1 becomes level 0
    tex.desc["mipmapFilterMode"] = tk.POINT
    assert float(tk.sample_lod(tex, (0.5, 0.5), 0, 2)) == 1000.0


def test_fetch_1d():
    tex = SimpleNamespace(data=np.array([5, 6, 255], np.uint8), desc=desc(read=tk.NORMALIZED_FLOAT),
                          resource="linear")
    assert tk.fetch_1d(tex, 2) == 1.0
    assert tk.fetch_1d(tex, 1) == np.float32(6 / 255)
    assert tk.fetch_1d(tex, 3) == 0 and tk.fetch_1d(tex, -1) == 0  # outside: zero
    pairs = SimpleNamespace(data=np.array([[1, 2], [3, 4]], np.float32), desc=desc(), resource="linear")
    assert tk.fetch_1d(pairs, 1).tolist() == [3, 4] and tk.fetch_1d(pairs, 7).tolist() == [0, 0]


def test_surface_x_is_in_bytes():
    data = np.zeros((2, 5, 4), np.float32)  # float4 texels
    assert tk.surface_element(data, 32, 2) == 2
    with pytest.raises(IndexError):
        tk.surface_element(data, 4, 2)


# ---------------------------------------------------------------- the kernels on a stand-in launch


class FakeLaunch:
    """Just enough of the sim's `launch`: parameters packed as a kernel's,
    device memory as numpy buffers, texture and surface objects by handle."""

    def __init__(self, params, memory, objects=None, grid=(1, 1, 1), block=(64, 1, 1)):
        self._params = [struct.pack(fmt, value) for fmt, value in params]
        self._memory = memory
        self._objects = objects or {}
        self.grid, self.block = grid, block

    def param(self, index, fmt):
        values = struct.unpack_from(fmt, self._params[index])
        return values[0] if len(values) == 1 else values

    def array(self, ptr, dtype, shape):
        dtype = np.dtype(dtype)
        shape = (int(shape),) if np.ndim(shape) == 0 else tuple(shape)
        for start, buffer in self._memory.items():
            if start <= ptr and ptr + int(np.prod(shape)) * dtype.itemsize <= start + buffer.nbytes:
                size = int(np.prod(shape)) * dtype.itemsize
                return buffer[ptr - start:ptr - start + size].view(dtype).reshape(shape)
        raise IndexError(f"{ptr:#x} is outside the fake memory")

    def texture(self, index):
        return self._objects[self.param(index, "Q")]

    surface = texture


def device(*arrays):
    """{address: bytes} for arrays, and their addresses."""
    memory, addresses = {}, []
    for n, a in enumerate(arrays):
        start = 0x10000 * (n + 1)
        memory[start] = np.frombuffer(bytearray(np.ascontiguousarray(a).tobytes()), np.uint8)
        addresses.append(start)
    return memory, addresses


def texture(data, **kw):
    return SimpleNamespace(data=data, desc=desc(**kw), resource="array", view=None, levels=[])


def test_sample_tex2d_kernel():
    grid = np.array([[16 * x + 64 * y + 1 for x in range(8)] for y in range(4)], np.float32)
    coords = np.array([[3.5, 2.5], [-2.0, 1.5], [3.0, 1.5]], np.float32)
    memory, (xy, out) = device(coords, np.zeros(3, np.float32))
    objects = {7: texture(grid), 8: texture(grid, linear=True)}
    tk.KERNELS["sampleTex2D"](FakeLaunch([("Q", 7), ("Q", xy), ("Q", out), ("i", 3)], memory, objects))
    assert memory[out].view(np.float32)[:3].tolist() == [grid[2, 3], grid[1, 0], grid[1, 3]]
    tk.KERNELS["sampleTex2D"](FakeLaunch([("Q", 8), ("Q", xy), ("Q", out), ("i", 3)], memory, objects))
    assert memory[out].view(np.float32)[2] == (grid[1, 2] + grid[1, 3]) / 2


def test_sample_tex2d4_kernel():
    texels = np.zeros((1, 2, 4), np.uint8)
    texels[0, 1] = [255, 0, 51, 102]
    memory, (xy, out) = device(np.array([[1.5, 0.5]], np.float32), np.zeros(4, np.float32))
    objects = {1: texture(texels, read=tk.NORMALIZED_FLOAT)}
    tk.KERNELS["sampleTex2D4"](FakeLaunch([("Q", 1), ("Q", xy), ("Q", out), ("i", 1)], memory, objects))
    assert memory[out].view(np.float32).tolist() == pytest.approx([1.0, 0.0, 0.2, 0.4])


def test_layered_3d_cubemap_and_lod_kernels():
    layered = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    memory, (c, out) = device(np.array([[2.5, 1.5, 1, 0], [0.5, 0.5, 0, 0]], np.float32), np.zeros(2, np.float32))
    objects = {1: texture(layered)}
    tk.KERNELS["sampleTex2DLayered"](FakeLaunch([("Q", 1), ("Q", c), ("Q", out), ("i", 2)], memory, objects))
    assert memory[out].view(np.float32).tolist() == [layered[1, 1, 2], layered[0, 0, 0]]
    tk.KERNELS["sampleTex3D"](FakeLaunch([("Q", 1), ("Q", c), ("Q", out), ("i", 2)], memory, objects))
    assert memory[out].view(np.float32).tolist() == [layered[1, 1, 2], layered[0, 0, 0]]  # z = 1.0 is slice 1

    strips = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    memory, (c, out) = device(np.array([[2.5, 1], [0.5, 0]], np.float32), np.zeros(2, np.float32))
    tk.KERNELS["sampleTex1DLayered"](FakeLaunch([("Q", 1), ("Q", c), ("Q", out), ("i", 2)], memory,
                                                {1: texture(strips)}))
    assert memory[out].view(np.float32).tolist() == [6, 1]

    cube = np.array([[[100 * f + 10 * y + x for x in range(3)] for y in range(3)] for f in range(6)], np.float32)
    memory, (c, out) = device(np.array([[0, -1, 0, 0], [0.7, -1, 0.1, 0]], np.float32), np.zeros(2, np.float32))
    tk.KERNELS["sampleCubemap"](FakeLaunch([("Q", 1), ("Q", c), ("Q", out), ("i", 2)], memory,
                                           {1: texture(cube, normalized=True)}))
    assert memory[out].view(np.float32).tolist() == [311, 312]

    tex = mipmapped(maxMipmapLevelClamp=3.0)
    memory, (c, out) = device(np.array([[0.5, 0.5, 3, 0], [0.25, 0.75, 1, 0]], np.float32), np.zeros(2, np.float32))
    tk.KERNELS["sampleTex2DLod"](FakeLaunch([("Q", 1), ("Q", c), ("Q", out), ("i", 2)], memory, {1: tex}))
    assert memory[out].view(np.float32).tolist() == [3000, 1000]


def test_fetch_kernel():
    memory, (index, out) = device(np.array([2, 0, 9], np.int32), np.zeros(3, np.float32))
    lin = SimpleNamespace(data=np.array([1.5, 2.5, 3.5], np.float32), desc=desc(), resource="linear")
    tk.KERNELS["fetchTex1D"](FakeLaunch([("Q", 4), ("Q", index), ("Q", out), ("i", 3)], memory, {4: lin}))
    assert memory[out].view(np.float32).tolist() == [3.5, 1.5, 0.0]


def test_surface_kernels():
    plane = np.zeros((7, 10), np.float32)
    objects = {3: SimpleNamespace(data=plane)}
    tk.KERNELS["writeSurface2D"](FakeLaunch([("Q", 3), ("i", 10), ("i", 7)], {}, objects))
    tk.KERNELS["doubleSurface2D"](FakeLaunch([("Q", 3), ("i", 10), ("i", 7)], {}, objects))
    assert plane[6, 9] == 2 * (9 + 600 + 0.5) and plane[0, 0] == 1.0
    line = np.zeros(33, np.int32)
    tk.KERNELS["writeSurface1D"](FakeLaunch([("Q", 3), ("i", 33)], {}, {3: SimpleNamespace(data=line)}))
    assert line.tolist() == [3 * x + 1 for x in range(33)]
    volume = np.zeros((3, 4, 5), np.float32)
    tk.KERNELS["writeSurface3D"](FakeLaunch([("Q", 3), ("i", 5), ("i", 4), ("i", 3)], {},
                                            {3: SimpleNamespace(data=volume)}))
    assert volume[2, 3, 4] == 4 + 30 + 200


def test_read_pitched_3d_kernel():
    pitch, rows, width, height, depth = 64, 8, 40, 6, 5
    raw = np.random.default_rng(1).integers(0, 256, depth * rows * pitch, dtype=np.uint8)
    memory, (base, out) = device(raw, np.zeros(depth * height * width, np.uint8))
    tk.KERNELS["readPitched3D"](FakeLaunch([("Q", base), ("Q", pitch), ("Q", rows), ("i", width), ("i", height),
                                            ("i", depth), ("Q", out)], memory))
    want = raw.reshape(depth, rows, pitch)[:, :height, :width]
    assert np.array_equal(memory[out].reshape(depth, height, width), want)


def test_every_kernel_of_the_program_has_an_implementation():
    source = (CUDA / "textures.cu").read_text()
    kernels = set(re.findall(r"__global__\s+void\s+(\w+)", source))
    assert kernels == set(tk.KERNELS)
