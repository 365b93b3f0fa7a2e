"""Sim implementations of the kernels of tests/cuda/textures.cu, and the
texture sampler they share.

A texture fetch is done here as the CUDA programming guide defines it
("Texture Fetching"):

* coordinates are in texel space, or normalized ([0, 1) across the texture,
  multiplied by its size) when the texture's normalizedCoords is set;
* point filtering reads texel floor(x); linear filtering blends texels
  floor(x - 0.5) and the next, with weight frac(x - 0.5) held in 9-bit fixed
  point with 8 fractional bits (rounded to the nearest 1/256);
* the address mode applies to each texel index: clamp to the edge, border
  (outside texels read the border colour), wrap and mirror (with a period of
  twice the size); wrap and mirror work with normalized coordinates only, and
  act as clamp with unnormalized ones;
* readMode cudaReadModeNormalizedFloat turns 8- and 16-bit integers into
  floats: unsigned v / max, signed max(v / max, -1);
* a cubemap direction picks the face of its largest component and face
  coordinates ((s/|m| + 1)/2, (t/|m| + 1)/2), by the guide's table;
* tex2DLod clamps the level of detail (plus mipmapLevelBias) to
  [minMipmapLevelClamp, maxMipmapLevelClamp] and to the levels there are;
  mipmapFilterMode point takes the nearest level, linear blends two;
* tex1Dfetch reads element i of linear memory, 0 outside it.

`launch.texture(i)` gives `.data` (texels indexed [layer or z][y][x], then
channels when there are several), `.desc` (the cudaTextureDesc by field name),
`.resource`, and for a mipmapped array `.levels` (each level's texels, level 0
first); `launch.surface(i).data` is writable.  Surfaces address x in bytes.
"""
import itertools

import numpy as np

WRAP, CLAMP, MIRROR, BORDER = 0, 1, 2, 3  # cudaTextureAddressMode
POINT, LINEAR = 0, 1                      # cudaTextureFilterMode
ELEMENT_TYPE, NORMALIZED_FLOAT = 0, 1     # cudaTextureReadMode


# ---------------------------------------------------------------- the sampler


def read_values(data: np.ndarray, read_mode: int) -> np.ndarray:
    """The texels as a fetch returns them: 8- and 16-bit integers as
    normalized floats when the read mode says so, half floats as floats,
    everything else as stored."""
    if read_mode == NORMALIZED_FLOAT and data.dtype.kind in "iu" and data.dtype.itemsize <= 2:
        values = data.astype(np.float64) / np.iinfo(data.dtype).max
        return np.maximum(values, -1.0).astype(np.float32)  # signed: the minimum reads as -1 too
    if data.dtype == np.float16:
        return data.astype(np.float32)
    return data


def address(i: int, n: int, mode: int, normalized: bool):
    """Texel index i of a side of n texels under an address mode; None for a
    texel outside the texture in border mode."""
    if not normalized and mode in (WRAP, MIRROR):
        mode = CLAMP
    if mode == WRAP:
        return i % n
    if mode == MIRROR:
        p = i % (2 * n)
        return p if p < n else 2 * n - 1 - p
    if mode == BORDER:
        return i if 0 <= i < n else None
    return min(max(i, 0), n - 1)


def weight8(fraction: float) -> float:
    """A filtering weight in 9-bit fixed point with 8 fractional bits."""
    return float(np.floor(fraction * 256.0 + 0.5)) / 256.0


class Texels:
    """A grid of texels of `dims` addressed dimensions (x, then y, then z),
    stored [z][y][x] then channels, read as the texture description says."""

    def __init__(self, data: np.ndarray, dims: int, desc: dict):
        self.values = read_values(np.asarray(data), desc["readMode"])
        self.dims = dims
        self.sizes = tuple(reversed(self.values.shape[:dims]))  # (width, height, depth)
        self.channels = self.values.shape[dims] if self.values.ndim > dims else 1
        self.modes = tuple(desc["addressMode"])
        self.normalized = bool(desc["normalizedCoords"])
        self.linear = desc["filterMode"] == LINEAR
        color = np.asarray(desc["borderColor"], dtype=np.float32)
        if self.values.dtype.kind in "iu":  # integer colours travel as the bits of the floats
            color = color.view(np.int32 if self.values.dtype.kind == "i" else np.uint32)
        self.border = color[:self.channels] if self.channels > 1 else color[0]

    def texel(self, index):
        """The texel at integer indices (x, y, z), address modes applied."""
        found = []
        for i, n, mode in zip(index, self.sizes, self.modes):
            j = address(i, n, mode, self.normalized)
            if j is None:
                return self.border
            found.append(j)
        return self.values[tuple(reversed(found))]

    def sample(self, coords, normalized=None):
        """A fetch at coordinates (x[, y[, z]]), float32 as a kernel passes them."""
        normalized = self.normalized if normalized is None else normalized
        coords = [np.float32(c) * np.float32(n) if normalized else np.float32(c) for c, n in zip(coords, self.sizes)]
        if not self.linear:
            return self.texel([int(np.floor(c)) for c in coords])
        base, weights = [], []
        for c in coords:
            shifted = np.float32(c) - np.float32(0.5)
            i = int(np.floor(shifted))
            base.append(i)
            weights.append(weight8(float(shifted) - i))
        total = 0.0
        for corner in itertools.product((0, 1), repeat=len(coords)):
            w = 1.0
            for d, step in enumerate(corner):
                w *= weights[d] if step else 1.0 - weights[d]
            total = total + w * np.asarray(self.texel([b + s for b, s in zip(base, corner)]), dtype=np.float64)
        return total


def layer_of(layer: int, layers: int) -> int:
    return min(max(int(layer), 0), layers - 1)


def cube_face(x: float, y: float, z: float):
    """(face, s, t): the face a direction points at (+x, -x, +y, -y, +z, -z)
    and the normalized coordinates on it."""
    x, y, z = np.float32(x), np.float32(y), np.float32(z)
    ax, ay, az = abs(x), abs(y), abs(z)
    if ax > ay and ax > az:
        face, m, s, t = (0, ax, -z, -y) if x >= 0 else (1, ax, z, -y)
    elif ay >= ax and ay > az:
        face, m, s, t = (2, ay, x, z) if y >= 0 else (3, ay, x, -z)
    else:
        face, m, s, t = (4, az, x, -y) if z >= 0 else (5, az, -x, -y)
    one, two = np.float32(1), np.float32(2)
    return face, (s / m + one) / two, (t / m + one) / two


def levels_of(tex) -> list:
    """The mip levels a texture reads (level 0 first); a resource view's
    firstMipmapLevel becomes level 0."""
    levels = list(getattr(tex, "levels", None) or [])
    if not levels:
        levels = [tex.data]
    view = getattr(tex, "view", None)
    if view and len(levels) > 1:
        first, last = view.get("firstMipmapLevel", 0), view.get("lastMipmapLevel", len(levels) - 1)
        levels = levels[first:max(last, first) + 1]
    return levels


def level_of_detail(desc: dict, lod: float, count: int) -> float:
    lod = float(lod) + float(desc.get("mipmapLevelBias", 0.0))
    lod = min(max(lod, float(desc.get("minMipmapLevelClamp", 0.0))), float(desc.get("maxMipmapLevelClamp", 0.0)))
    return min(max(lod, 0.0), count - 1.0)


def sample_lod(tex, coords, lod: float, dims: int):
    """tex1DLod/tex2DLod/tex3DLod on a (mipmapped) texture."""
    levels = levels_of(tex)
    lod = level_of_detail(tex.desc, lod, len(levels))
    if tex.desc.get("mipmapFilterMode", POINT) == POINT:
        return Texels(levels[int(np.floor(lod + 0.5))], dims, tex.desc).sample(coords)
    low = int(np.floor(lod))
    high = min(low + 1, len(levels) - 1)
    w = weight8(lod - low)
    a = np.asarray(Texels(levels[low], dims, tex.desc).sample(coords), dtype=np.float64)
    b = np.asarray(Texels(levels[high], dims, tex.desc).sample(coords), dtype=np.float64)
    return (1 - w) * a + w * b


def fetch_1d(tex, index: int):
    """tex1Dfetch: element `index` of linear memory (no filtering, no
    address modes; 0 outside)."""
    values = read_values(tex.data, tex.desc["readMode"])
    if not 0 <= index < values.shape[0]:
        return np.zeros(values.shape[1:], values.dtype) if values.ndim > 1 else values.dtype.type(0)
    return values[index]


def surface_element(data: np.ndarray, x_bytes: int, dims: int) -> int:
    """The element a surface's byte offset x names."""
    element = data.dtype.itemsize * (data.shape[dims] if data.ndim > dims else 1)
    if x_bytes % element:
        raise IndexError(f"surface access at byte {x_bytes}: not a multiple of the {element}-byte element")
    return x_bytes // element


# ---------------------------------------------------------------- kernels


def _count(launch, index: int) -> int:
    return max(launch.param(index, "i"), 0)


def _samples(launch, columns: int, out_channels: int = 1):
    """(coordinates (n, columns) float32, out (n[, channels]) float32) of a
    sample kernel (tex, coords, out, n)."""
    n = _count(launch, 3)
    coords = launch.array(launch.param(1, "Q"), np.float32, (n, columns))
    out = launch.array(launch.param(2, "Q"), np.float32, (n, out_channels) if out_channels > 1 else n)
    return n, coords, out


def sample_tex2d(launch):
    tex = launch.texture(0)
    n, xy, out = _samples(launch, 2)
    texels = Texels(tex.data, 2, tex.desc)
    for i in range(n):
        out[i] = texels.sample(xy[i])


def sample_tex2d4(launch):
    tex = launch.texture(0)
    n, xy, out = _samples(launch, 2, 4)
    texels = Texels(tex.data, 2, tex.desc)
    for i in range(n):
        out[i] = texels.sample(xy[i])


def sample_tex1d_layered(launch):
    tex = launch.texture(0)
    n, xl, out = _samples(launch, 2)
    layers = [Texels(layer, 1, tex.desc) for layer in tex.data]
    for i in range(n):
        out[i] = layers[layer_of(xl[i][1], len(layers))].sample(xl[i][:1])


def sample_tex2d_layered(launch):
    tex = launch.texture(0)
    n, xyl, out = _samples(launch, 4)
    layers = [Texels(layer, 2, tex.desc) for layer in tex.data]
    for i in range(n):
        out[i] = layers[layer_of(xyl[i][2], len(layers))].sample(xyl[i][:2])


def sample_tex3d(launch):
    tex = launch.texture(0)
    n, xyz, out = _samples(launch, 4)
    texels = Texels(tex.data, 3, tex.desc)
    for i in range(n):
        out[i] = texels.sample(xyz[i][:3])


def sample_cube(faces: list, direction, layer: int = 0):
    """texCubemap(Layered): `faces` the Texels of each face, cube after cube."""
    face, s, t = cube_face(*direction[:3])
    return faces[6 * layer_of(layer, len(faces) // 6) + face].sample((s, t), normalized=True)


def sample_cubemap(launch):
    tex = launch.texture(0)
    n, dirs, out = _samples(launch, 4)
    faces = [Texels(face, 2, tex.desc) for face in tex.data]
    for i in range(n):
        out[i] = sample_cube(faces, dirs[i])


def sample_cubemap_layered(launch):
    tex = launch.texture(0)
    n, dirs, out = _samples(launch, 4)
    faces = [Texels(face, 2, tex.desc) for face in tex.data]
    for i in range(n):
        out[i] = sample_cube(faces, dirs[i], int(dirs[i][3]))


def sample_tex2d_lod(launch):
    tex = launch.texture(0)
    n, xyl, out = _samples(launch, 4)
    for i in range(n):
        out[i] = sample_lod(tex, xyl[i][:2], xyl[i][2], 2)


def fetch_tex1d(launch):
    tex = launch.texture(0)
    n = _count(launch, 3)
    index = launch.array(launch.param(1, "Q"), np.int32, n)
    out = launch.array(launch.param(2, "Q"), np.float32, n)
    for i in range(n):
        out[i] = fetch_1d(tex, int(index[i]))


def write_surface_1d(launch):
    data = launch.surface(0).data
    for x in range(_count(launch, 1)):
        data[surface_element(data, x * 4, 1)] = 3 * x + 1


def write_surface_2d(launch):
    data = launch.surface(0).data
    width, height = _count(launch, 1), _count(launch, 2)
    for y in range(height):
        for x in range(width):
            data[y, surface_element(data, x * 4, 2)] = np.float32(x) + np.float32(100) * y + np.float32(0.5)


def double_surface_2d(launch):
    data = launch.surface(0).data
    width, height = _count(launch, 1), _count(launch, 2)
    for y in range(height):
        for x in range(width):
            e = surface_element(data, x * 4, 2)
            data[y, e] = np.float32(2) * data[y, e]


def write_surface_3d(launch):
    data = launch.surface(0).data
    width, height, depth = _count(launch, 1), _count(launch, 2), _count(launch, 3)
    for z in range(depth):
        for y in range(height):
            for x in range(width):
                data[z, y, surface_element(data, x * 4, 3)] = np.float32(x) + np.float32(10) * y + np.float32(100) * z


def read_pitched_3d(launch):
    """out = the box of width x height x depth bytes at base (rows `pitch`
    bytes apart, slices `rows` rows apart), packed."""
    base, pitch, rows = launch.param(0, "Q"), launch.param(1, "Q"), launch.param(2, "Q")
    width, height, depth = _count(launch, 3), _count(launch, 4), _count(launch, 5)
    out = launch.array(launch.param(6, "Q"), np.uint8, (depth, height, width))
    if not (width and height and depth):
        return
    src = launch.array(base, np.uint8, ((depth - 1) * rows + (height - 1)) * pitch + width)
    for z in range(depth):
        for y in range(height):
            start = (z * rows + y) * pitch
            out[z, y] = src[start:start + width]


KERNELS = {
    "readPitched3D": read_pitched_3d,
    "sampleTex2D": sample_tex2d,
    "sampleTex2D4": sample_tex2d4,
    "sampleTex1DLayered": sample_tex1d_layered,
    "sampleTex2DLayered": sample_tex2d_layered,
    "sampleTex3D": sample_tex3d,
    "sampleCubemap": sample_cubemap,
    "sampleCubemapLayered": sample_cubemap_layered,
    "sampleTex2DLod": sample_tex2d_lod,
    "fetchTex1D": fetch_tex1d,
    "writeSurface1D": write_surface_1d,
    "writeSurface2D": write_surface_2d,
    "doubleSurface2D": double_surface_2d,
    "writeSurface3D": write_surface_3d,
}
