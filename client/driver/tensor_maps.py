"""CUDA driver API: tensor maps (cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col,
cuTensorMapEncodeIm2colWide, cuTensorMapReplaceAddress).

A CUtensorMap is 128 opaque bytes that a kernel gets by value and hands to
its GPU's copy engine, so they must be that GPU's driver's: the current
context's server encodes them (tensor_map_encode; a sim server checks the
parameters by cuda.h's rules and encodes them its own way, rcuda/tensor_maps.py)
and the client writes them where the program asked.  A bad parameter is
CUDA_ERROR_INVALID_VALUE, as from the driver.
"""
from __future__ import annotations

from rcuda.driver_errors import CUresult, DriverError
from rcuda.tensor_maps import IM2COL, IM2COL_WIDE, SIZE, TILED

from .. import interposer
from .registry import SUCCESS, driver
from .contexts import current_context


def _device():
    return interposer.rt.device(current_context("cuTensorMapEncode").ordinal)


def _values(array, count: int, call: str, name: str) -> list[int]:
    if count and array == interposer.ffi.NULL:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE, f"{call}: {name} is NULL")
    return [int(array[i]) for i in range(count)]


def _out(tensorMap, call: str) -> int:
    at = interposer.address(tensorMap)
    if not at or at % 64:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE, f"{call}: tensorMap {at:#x} must be 64-byte aligned")
    return at


def _store(at: int, frames) -> int:
    """The server's map (reply frames) where the program asked."""
    interposer.ffi.memmove(interposer.ffi.cast("void *", at), b"".join(bytes(f.buffer) for f in frames), SIZE)
    return SUCCESS


def _encode(tensorMap, call: str, **fields) -> int:
    at = _out(tensorMap, call)
    return _store(at, _device().request("tensor_map_encode", map=fields)[1])


def _common(call, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides) -> dict:
    rank = int(tensorRank)
    if not 1 <= rank <= 5:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE, f"{call}: tensorRank {rank} must be 1 to 5")
    return {"data_type": int(tensorDataType), "rank": rank, "address": interposer.address(globalAddress),
            "dims": _values(globalDim, rank, call, "globalDim"),
            "strides": _values(globalStrides, rank - 1, call, "globalStrides"),
            "element_strides": _values(elementStrides, rank, call, "elementStrides")}


@driver()
def cuTensorMapEncodeTiled(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, boxDim,
                           elementStrides, interleave, swizzle, l2Promotion, oobFill):
    call = "cuTensorMapEncodeTiled"
    fields = _common(call, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides)
    return _encode(tensorMap, call, kind=TILED, box=_values(boxDim, fields["rank"], call, "boxDim"),
                   interleave=int(interleave), swizzle=int(swizzle), l2_promotion=int(l2Promotion),
                   oob_fill=int(oobFill), **fields)


def _corners(rank: int) -> int:
    return {3: 1, 4: 2, 5: 3}.get(rank, 0)


@driver()
def cuTensorMapEncodeIm2col(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                            pixelBoxLowerCorner, pixelBoxUpperCorner, channelsPerPixel, pixelsPerColumn,
                            elementStrides, interleave, swizzle, l2Promotion, oobFill):
    call = "cuTensorMapEncodeIm2col"
    fields = _common(call, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides)
    corners = _corners(fields["rank"])
    return _encode(tensorMap, call, kind=IM2COL, lower=_values(pixelBoxLowerCorner, corners, call, "pixelBoxLowerCorner"),
                   upper=_values(pixelBoxUpperCorner, corners, call, "pixelBoxUpperCorner"),
                   channels=int(channelsPerPixel), pixels=int(pixelsPerColumn), interleave=int(interleave),
                   swizzle=int(swizzle), l2_promotion=int(l2Promotion), oob_fill=int(oobFill), **fields)


@driver()
def cuTensorMapEncodeIm2colWide(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
                                pixelBoxLowerCornerWidth, pixelBoxUpperCornerWidth, channelsPerPixel, pixelsPerColumn,
                                elementStrides, interleave, mode, swizzle, l2Promotion, oobFill):
    call = "cuTensorMapEncodeIm2colWide"
    fields = _common(call, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides)
    return _encode(tensorMap, call, kind=IM2COL_WIDE, lower=[int(pixelBoxLowerCornerWidth)],
                   upper=[int(pixelBoxUpperCornerWidth)], channels=int(channelsPerPixel), pixels=int(pixelsPerColumn),
                   interleave=int(interleave), mode=int(mode), swizzle=int(swizzle), l2_promotion=int(l2Promotion),
                   oob_fill=int(oobFill), **fields)


@driver()
def cuTensorMapReplaceAddress(tensorMap, globalAddress):
    call = "cuTensorMapReplaceAddress"
    at = _out(tensorMap, call)
    raw = bytes(interposer.ffi.buffer(interposer.ffi.cast("char *", at), SIZE))
    return _store(at, _device().request("tensor_map_replace", address=interposer.address(globalAddress),
                                        frames=[raw])[1])
