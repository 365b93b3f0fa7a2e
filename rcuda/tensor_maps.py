"""Tensor maps (cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col,
cuTensorMapEncodeIm2colWide, cuTensorMapReplaceAddress): the rules cuda.h
documents for their parameters, and the sim's own encoding of a map.

A CUtensorMap is 128 opaque bytes a kernel gets by value and hands to the
GPU's copy engine (TMA).  A GPU server's driver encodes it (its bytes are
that driver's); a sim server checks the parameters against these rules and
encodes them as below, which its kernel plugins decode with `decode`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

#: CUtensorMapDataType -> bits per element (the packed types: per value).
ELEMENT_BITS = {0: 8, 1: 16, 2: 32, 3: 32, 4: 64, 5: 64, 6: 16, 7: 32, 8: 64, 9: 16, 10: 32, 11: 32, 12: 32,
                13: 4, 14: 4, 15: 6}
FLOAT_TYPES = {6, 7, 8, 9, 10, 11, 12}
U4_ALIGN8B, U4_ALIGN16B, U6_ALIGN16B = 13, 14, 15
INTERLEAVE_NONE, INTERLEAVE_16B, INTERLEAVE_32B = 0, 1, 2
SWIZZLE_NONE, SWIZZLE_32B, SWIZZLE_64B, SWIZZLE_128B = 0, 1, 2, 3
SWIZZLES = range(7)  # up to CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B
SWIZZLE_SPAN = {1: 32, 2: 64}  # the rest: 128
L2_PROMOTIONS = range(4)
OOB_FILLS = range(2)
WIDE_MODES = range(2)  # CU_TENSOR_MAP_IM2COL_WIDE_MODE_W, _W128
#: im2col's corner offsets by rank: (how many, lowest, highest).
CORNERS = {3: (1, -32768, 32767), 4: (2, -128, 127), 5: (3, -16, 15)}

TILED, IM2COL, IM2COL_WIDE = 1, 2, 3
SIZE = 128


class TensorMapError(ValueError):
    """A parameter cuda.h's rules refuse (CUDA_ERROR_INVALID_VALUE)."""


@dataclass
class TensorMap:
    kind: int
    data_type: int
    rank: int
    address: int
    dims: list[int]
    strides: list[int]          # bytes, rank - 1 of them
    element_strides: list[int]
    interleave: int
    swizzle: int
    l2_promotion: int
    oob_fill: int
    box: list[int] = field(default_factory=list)    # tiled
    lower: list[int] = field(default_factory=list)  # im2col corners
    upper: list[int] = field(default_factory=list)
    channels: int = 0
    pixels: int = 0
    mode: int = 0               # im2col wide


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TensorMapError(message)


def check(m: TensorMap) -> None:
    """cuda.h's rules for `m`'s parameters; TensorMapError naming the first broken."""
    _require(m.data_type in ELEMENT_BITS, f"tensorDataType {m.data_type} is not a CUtensorMapDataType")
    _require(m.interleave in (INTERLEAVE_NONE, INTERLEAVE_16B, INTERLEAVE_32B), f"interleave {m.interleave}")
    _require(m.swizzle in SWIZZLES, f"swizzle {m.swizzle}")
    _require(m.l2_promotion in L2_PROMOTIONS, f"l2Promotion {m.l2_promotion}")
    _require(m.oob_fill in OOB_FILLS, f"oobFill {m.oob_fill}")
    if m.kind == TILED:
        _require(1 <= m.rank <= 5, f"tensorRank {m.rank} must be 1 to 5")
        _require(m.interleave == INTERLEAVE_NONE or m.rank >= 3, "an interleaved tensor's rank must be 3 or more")
    else:
        _require(3 <= m.rank <= 5, f"tensorRank {m.rank} must be 3, 4 or 5 for im2col")
    packed16 = m.data_type in (U4_ALIGN16B, U6_ALIGN16B)
    alignment = 32 if m.interleave == INTERLEAVE_32B or packed16 else 16
    _require(m.address % alignment == 0, f"globalAddress {m.address:#x} must be {alignment}-byte aligned")
    _require(len(m.dims) == m.rank and all(1 <= d <= 1 << 32 for d in m.dims),
             "globalDim: each of tensorRank sizes must be 1 to 2^32")
    if packed16:
        _require(m.dims[0] % 128 == 0, "globalDim[0] of a 16U4_ALIGN16B or 16U6_ALIGN16B tensor must be a multiple of 128")
    if m.data_type == U4_ALIGN8B:
        _require(m.dims[0] % 2 == 0, "globalDim[0] of a 16U4_ALIGN8B tensor must be even")
    stride_unit = 32 if m.interleave == INTERLEAVE_32B or packed16 else 16
    _require(len(m.strides) == m.rank - 1 and all(s % stride_unit == 0 and 0 <= s < 1 << 40 for s in m.strides),
             f"globalStrides must be multiples of {stride_unit} below 2^40")
    _require(len(m.element_strides) == m.rank and all(1 <= s <= 8 for s in m.element_strides),
             "elementStrides must be 1 to 8")
    if m.data_type == U6_ALIGN16B:
        _require(m.interleave == INTERLEAVE_NONE, "a 16U6_ALIGN16B tensor cannot be interleaved")
    if m.interleave == INTERLEAVE_32B:
        _require(m.swizzle == SWIZZLE_32B, "a 32B-interleaved tensor needs CU_TENSOR_MAP_SWIZZLE_32B")
    if m.oob_fill:
        _require(m.data_type in FLOAT_TYPES, "the NaN out-of-bounds fill is for floating-point types only")
    inner_elements = m.box[0] if m.kind == TILED else m.channels
    if m.kind == TILED:
        _require(len(m.box) == m.rank and all(1 <= b <= 256 for b in m.box), "boxDim must be 1 to 256")
        if packed16:
            _require(m.box[0] == 128, "boxDim[0] of a 16U4_ALIGN16B or 16U6_ALIGN16B tensor must be 128")
    else:
        _require(1 <= m.channels <= 256, f"channelsPerPixel {m.channels} must be 1 to 256")
        if packed16:
            _require(m.channels == 128, "channelsPerPixel of a 16U4_ALIGN16B or 16U6_ALIGN16B tensor must be 128")
        _check_corners(m)
    inner_bytes = inner_elements * ELEMENT_BITS[m.data_type] // 8
    if m.interleave == INTERLEAVE_NONE:
        if m.kind == TILED:
            _require(inner_bytes % 16 == 0, "boxDim[0] times the element size must be a multiple of 16 bytes")
        if m.swizzle != SWIZZLE_NONE:
            _require(inner_bytes <= SWIZZLE_SPAN.get(m.swizzle, 128),
                     f"the box's inner dimension ({inner_bytes} bytes) is wider than the swizzle")
    if m.kind == IM2COL_WIDE:
        _require(m.mode in WIDE_MODES, f"mode {m.mode}")
        _require(m.swizzle in (SWIZZLE_64B, SWIZZLE_128B, 4), "im2col-wide swizzles are 64B, 128B and 128B_ATOM_32B")


def _check_corners(m: TensorMap) -> None:
    if m.kind == IM2COL_WIDE:
        count, low, high = 1, -32768, 32767
        if m.mode == 0:
            _require(1 <= m.pixels <= 1024, f"pixelsPerColumn {m.pixels} must be 1 to 1024")
    else:
        count, low, high = CORNERS[m.rank]
        _require(1 <= m.pixels <= 1024, f"pixelsPerColumn {m.pixels} must be 1 to 1024")
    _require(len(m.lower) == count and len(m.upper) == count and all(low <= v <= high for v in m.lower + m.upper),
             f"a rank-{m.rank} tensor's box corners are {count} offset(s) in [{low}, {high}]")


# ---------------------------------------------------------------- the sim's encoding

MAGIC = b"rcTM"
_HEAD = struct.Struct("<4s8BQ5I4Q5H5B3h3hHH")
assert _HEAD.size <= SIZE


def encode(m: TensorMap) -> bytes:
    """The sim's CUtensorMap bytes (checked first)."""
    check(m)
    pad = lambda values, n, fill=0: [*values, *[fill] * (n - len(values))]  # noqa: E731
    raw = _HEAD.pack(MAGIC, m.kind, m.data_type, m.rank, m.interleave, m.swizzle, m.l2_promotion, m.oob_fill,
                     m.mode, m.address, *pad([d - 1 for d in m.dims], 5), *pad(m.strides, 4),
                     *pad(m.box, 5), *pad(m.element_strides, 5), *pad(m.lower, 3), *pad(m.upper, 3),
                     m.channels, m.pixels)
    return raw.ljust(SIZE, b"\0")


def decode(raw: bytes) -> TensorMap:
    """What `encode` made (a sim kernel plugin reads its map argument so)."""
    fields = _HEAD.unpack_from(raw)
    if fields[0] != MAGIC:
        raise TensorMapError("not a tensor map this sim encoded")
    kind, data_type, rank, interleave, swizzle, l2, oob, mode = fields[1:9]
    address, dims, strides = fields[9], fields[10:15], fields[15:19]
    box, element_strides = fields[19:24], fields[24:29]
    lower, upper, channels, pixels = fields[29:32], fields[32:35], fields[35], fields[36]
    count = (1 if kind == IM2COL_WIDE else CORNERS.get(rank, (0,))[0]) if kind != TILED else 0
    return TensorMap(kind, data_type, rank, address, [d + 1 for d in dims[:rank]], list(strides[:rank - 1]),
                     list(element_strides[:rank]), interleave, swizzle, l2, oob,
                     box=list(box[:rank]) if kind == TILED else [], lower=list(lower[:count]),
                     upper=list(upper[:count]), channels=channels, pixels=pixels, mode=mode)


def replace_address(raw: bytes, address: int) -> bytes:
    """cuTensorMapReplaceAddress on the sim's bytes: the alignment rules again."""
    m = decode(raw)
    m.address = address
    return encode(m)
