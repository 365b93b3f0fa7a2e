"""CUDA arrays and region copies, as every backend checks them.

A CUDA array (cudaMallocArray, cudaMalloc3DArray, one level of a mipmapped
array) is opaque texel storage; the client names it by an id it chose.  Its
`ArraySpec` says what CUDA says of it: the channel format, the extent in
CUDA's convention (height 0 for 1-D, depth 0 unless 3-D or layered) and the
flags.  A region copy moves a box of `width` bytes by `height` rows by
`depth` slices between two `Place`s: linear memory (a pointer, its pitch and
its rows per slice) or an array (byte offset x, row y, slice z).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rcuda.array_rules import CUBEMAP, KNOWN_FLAGS, LAYERED, TEXTURE_GATHER, layered, level_sides
from rcuda.errors import CudaError, ProtocolError, cudaError

#: Channel formats, by their wire names.
FORMATS = {name: np.dtype(name) for name in
           ("int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32")}
CHANNELS = (1, 2, 4)


#: Largest region one request may move (bytes), and most levels of a mipmapped array.
MAX_REGION_BYTES = 1 << 40
MAX_LEVELS = 32
#: Largest array side rcuda accepts (CUDA's largest texture side).
MAX_SIDE = 1 << 17


def invalid(message: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidValue, message)


@dataclass(frozen=True)
class ArraySpec:
    format: str
    channels: int
    width: int
    height: int
    depth: int
    flags: int
    levels: int = 0  # 0: a plain array; n: a mipmapped array of n levels

    @classmethod
    def from_wire(cls, header: dict) -> "ArraySpec":
        spec = cls(header["format"], header["channels"], header["width"], header["height"], header["depth"],
                   header["flags"], header["levels"])
        spec.check()
        return spec

    def check(self) -> None:
        if self.format not in FORMATS or self.channels not in CHANNELS:
            raise CudaError(cudaError.cudaErrorInvalidChannelDescriptor,
                            f"a CUDA array of {self.channels} channel(s) of {self.format!r}: arrays have 1, 2 or 4 "
                            f"channels of {', '.join(FORMATS)}")
        if self.flags & ~KNOWN_FLAGS:
            raise invalid(f"CUDA array flags {self.flags:#x}")
        sides = (self.width, self.height, self.depth)
        if any(side < 0 or side > MAX_SIDE for side in sides) or self.width == 0:
            raise invalid(f"a CUDA array of {self.width} x {self.height} x {self.depth}")
        if self.depth and not self.height and not self.flags & LAYERED:
            raise invalid(f"a 3-D CUDA array needs a height (extent {self.width} x 0 x {self.depth})")
        if self.flags & CUBEMAP:
            faces = 6 * (self.depth // 6 if self.flags & LAYERED else 1)
            if self.width != self.height or self.depth != faces or faces == 0:
                raise invalid(f"a cubemap CUDA array must be square with depth 6 (6 x layers when layered), "
                              f"not {self.width} x {self.height} x {self.depth}")
        elif self.flags & LAYERED and not self.depth:
            raise invalid("a layered CUDA array needs its number of layers as depth")
        if self.flags & TEXTURE_GATHER and (not self.height or self.depth or self.flags & (LAYERED | CUBEMAP)):
            raise invalid("cudaArrayTextureGather is for 2-D arrays")
        if not 0 <= self.levels <= MAX_LEVELS:
            raise invalid(f"a mipmapped array of {self.levels} levels")
        shrinking = (self.width, self.height) + (() if self.layered else (self.depth,))
        if self.levels > 1 + int(np.log2(max(shrinking))):
            raise invalid(f"{self.levels} levels for a {self.width} x {self.height} x {self.depth} "
                          f"mipmapped array: a level below 1 x 1 x 1")

    @property
    def dtype(self) -> np.dtype:
        return FORMATS[self.format]

    @property
    def element_size(self) -> int:
        return self.dtype.itemsize * self.channels

    @property
    def layered(self) -> bool:
        return layered(self.flags)

    def level_sides(self, level: int) -> tuple[int, int, int]:
        return level_sides(self.width, self.height, self.depth, self.flags, level)

    def storage(self, level: int = 0) -> tuple[int, int, int]:
        """(slices, rows, bytes per row) of a level's texels."""
        width, height, depth = self.level_sides(level)
        return max(depth, 1), max(height, 1), width * self.element_size

    def nbytes(self, level: int = 0) -> int:
        slices, rows, row_bytes = self.storage(level)
        return slices * rows * row_bytes

    def texel_shape(self, level: int = 0) -> tuple[int, ...]:
        """The shape a kernel plugin sees (launch.texture(i).data): the
        dimensions the array has, [layer or z][y][x], then channels when
        there are several."""
        width, height, depth = self.level_sides(level)
        shape = tuple(side for side in (depth, height) if side) + (width,)
        return shape + ((self.channels,) if self.channels > 1 else ())

    def check_level(self, level: int) -> None:
        if not 0 <= level < max(self.levels, 1):
            raise invalid(f"level {level} of a CUDA array with {max(self.levels, 1)} level(s)")


@dataclass(frozen=True)
class Place:
    """One side of a region copy: linear memory, or an array (level) at an offset."""

    ptr: int = 0
    pitch: int = 0
    rows: int = 0
    array: int | None = None
    level: int = 0
    x: int = 0
    y: int = 0
    z: int = 0

    @classmethod
    def from_wire(cls, value, what: str) -> "Place":
        if not isinstance(value, dict):
            raise ProtocolError(f"{what}: a place is a map, not {type(value).__name__}")
        fields = ("array", "level", "x", "y", "z") if "array" in value else ("ptr", "pitch", "rows")
        if set(value) != set(fields) or not all(type(value[f]) is int for f in fields):
            raise ProtocolError(f"{what}: a place has the integer fields {', '.join(fields)}, got {value!r:.80}")
        if any(value[f] < 0 for f in fields if f != "ptr"):
            raise invalid(f"{what}: negative offsets or pitch in {value}")
        return cls(**value)

    @property
    def is_array(self) -> bool:
        return self.array is not None

    def at(self, y: int, z: int) -> "Place":
        """The place of the box's row y of slice z (a part of a copy)."""
        if self.is_array:
            return Place(array=self.array, level=self.level, x=self.x, y=self.y + y, z=self.z + z)
        return Place(self.ptr + (z * self.rows + y) * self.pitch, self.pitch, self.rows)

    def linear_span(self, extent: tuple[int, int, int], what: str) -> int:
        """Bytes from `ptr` to the region's last byte + 1, pitches checked."""
        width, height, depth = extent
        if (height > 1 or depth > 1) and self.pitch < width:
            raise CudaError(cudaError.cudaErrorInvalidPitchValue,
                            f"{what}: a pitch of {self.pitch} bytes is less than the width {width}")
        if depth > 1 and self.rows < height:
            raise invalid(f"{what}: slices of {self.rows} rows hold no {height}-row region")
        return ((depth - 1) * self.rows + (height - 1)) * self.pitch + width

    def check_in_array(self, spec: ArraySpec, extent: tuple[int, int, int], what: str) -> None:
        spec.check_level(self.level)
        width, height, depth = extent
        slices, rows, row_bytes = spec.storage(self.level)
        if self.x % spec.element_size or width % spec.element_size:
            raise invalid(f"{what}: {width} bytes at byte {self.x} are not whole {spec.element_size}-byte elements")
        if self.x + width > row_bytes or self.y + height > rows or self.z + depth > slices:
            raise invalid(f"{what}: a region of {width} bytes x {height} x {depth} at ({self.x}, {self.y}, {self.z}) "
                          f"runs outside the array's {row_bytes} bytes x {rows} x {slices}")


def extent_from_wire(value, what: str) -> tuple[int, int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 3 or not all(type(v) is int for v in value):
        raise ProtocolError(f"{what}: an extent is [width, height, depth], got {value!r:.60}")
    width, height, depth = value
    if min(value) < 1:
        raise ProtocolError(f"{what}: an empty extent {list(value)} (empty copies are not sent)")
    if width * height * depth > MAX_REGION_BYTES:
        raise invalid(f"{what}: a region of {width} x {height} x {depth} bytes")
    return width, height, depth
