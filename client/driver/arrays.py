"""CUDA driver API: CUDA arrays and mipmapped arrays, and the 1-D copies to
and from them.

The runtime's arrays behind the driver's names: a CUarray is a cudaArray_t
(one handle table, client/memory/arrays.py), so arrays made by either API
serve the other; everything goes through client/runtime/arrays.py and the
runtime's boxes (client/runtime/boxes.py).  The driver describes a channel
format as a CUarray_format and a number of channels where the runtime has a
cudaChannelFormatDesc: an array made here gets the runtime description of
its format (cudaGetChannelDesc answers for it), and any array answers
cuArray3DGetDescriptor.

cuMemcpy2D/3D with CU_MEMORYTYPE_ARRAY sides are client/driver/memory.py's.
"""
from __future__ import annotations

import functools

from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..memory.arrays import CudaArray
from ..runtime import arrays as runtime_arrays
from ..runtime import boxes
from ..runtime.memory import DEVICE_TO_DEVICE, DEVICE_TO_HOST, HOST_TO_DEVICE
from ..interposer import address, out_pointer, stream_of
from . import memory as driver_memory
from .registry import SUCCESS, driver, from_runtime, require_initialized

#: The wire's channel formats and the CUarray_format of each.
FORMAT_NAMES = {"uint8": "CU_AD_FORMAT_UNSIGNED_INT8", "uint16": "CU_AD_FORMAT_UNSIGNED_INT16",
                "uint32": "CU_AD_FORMAT_UNSIGNED_INT32", "int8": "CU_AD_FORMAT_SIGNED_INT8",
                "int16": "CU_AD_FORMAT_SIGNED_INT16", "int32": "CU_AD_FORMAT_SIGNED_INT32",
                "float16": "CU_AD_FORMAT_HALF", "float32": "CU_AD_FORMAT_FLOAT"}


def rt():
    return interposer.rt


def _invalid(call: str, why: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {why}")


# ------------------------------------------------------------------ channel formats


@functools.cache
def _wire_formats() -> dict[int, str]:
    """CUarray_format -> wire format (the interposer's lib is bound by the first call)."""
    return {getattr(interposer.lib, name): wire for wire, name in FORMAT_NAMES.items()}


def wire_format(number: int, channels: int, call: str) -> tuple[str, int]:
    """(wire format, channels) of a CUarray_format and a number of channels."""
    fmt = _wire_formats().get(number)
    if fmt is None or channels not in (1, 2, 4):
        raise _invalid(call, f"{channels} channel(s) of CUarray_format {number:#x}: rcuda's arrays and textures hold "
                             f"1, 2 or 4 channels of an 8-, 16- or 32-bit integer, a half or a float")
    return fmt, channels


def format_number(fmt: str) -> int:
    """The CUarray_format of a wire format."""
    return getattr(interposer.lib, FORMAT_NAMES[fmt])


# ------------------------------------------------------------------ arrays


def array_of(handle, call: str, mipmapped: bool = False) -> CudaArray:
    """A CUarray (or CUmipmappedArray): NULL is CUDA_ERROR_INVALID_VALUE, as
    in cuMemcpy2D/3D, one unknown CUDA_ERROR_INVALID_HANDLE."""
    if not address(handle):
        raise _invalid(call, "a NULL " + ("CUmipmappedArray" if mipmapped else "CUarray"))
    return rt().arrays.get(address(handle), call, mipmapped)


def _create(pHandle, sides, number: int, channels: int, flags: int, levels: int, call: str) -> CUresult:
    require_initialized()
    out_pointer(pHandle, "pHandle")
    fmt, channels = wire_format(number, channels, call)
    array = runtime_arrays.create_array(rt().device(), fmt, channels, sides, flags,
                                        runtime_arrays.desc_of(fmt, channels), levels, call)
    pHandle[0] = interposer.ffi.cast("void *", array.handle)
    return SUCCESS


@driver()
def cuArrayCreate_v2(pHandle, pAllocateArray):
    """A 1-D (Height 0) or 2-D array."""
    d = out_pointer(pAllocateArray, "pAllocateArray")
    return _create(pHandle, (d.Width, d.Height, 0), d.Format, d.NumChannels, 0, 0, "cuArrayCreate")


@driver()
def cuArray3DCreate_v2(pHandle, pAllocateArray):
    """The sides and CUDA_ARRAY3D_* flags are cudaMalloc3DArray's, value for value."""
    d = out_pointer(pAllocateArray, "pAllocateArray")
    return _create(pHandle, (d.Width, d.Height, d.Depth), d.Format, d.NumChannels, d.Flags, 0, "cuArray3DCreate")


@driver()
def cuMipmappedArrayCreate(pHandle, pMipmappedArrayDesc, numMipmapLevels):
    d = out_pointer(pMipmappedArrayDesc, "pMipmappedArrayDesc")
    if numMipmapLevels < 1:
        raise _invalid("cuMipmappedArrayCreate", f"{numMipmapLevels} levels")
    return _create(pHandle, (d.Width, d.Height, d.Depth), d.Format, d.NumChannels, d.Flags, numMipmapLevels,
                   "cuMipmappedArrayCreate")


@driver()
def cuMipmappedArrayGetLevel(pLevelArray, hMipmappedArray, level):
    require_initialized()
    call = "cuMipmappedArrayGetLevel"
    out_pointer(pLevelArray, "pLevelArray")
    mipmapped = array_of(hMipmappedArray, call, mipmapped=True)
    pLevelArray[0] = interposer.ffi.cast("void *", runtime_arrays.array_level(mipmapped, level, call).handle)
    return SUCCESS




@driver()
def cuArrayCreate(pHandle, pAllocateArray):
    """CUDA 2.0's form: 32-bit sides, read as cuArrayCreate_v2 reads its own."""
    return cuArrayCreate_v2(pHandle, pAllocateArray)


@driver()
def cuArray3DCreate(pHandle, pAllocateArray):
    return cuArray3DCreate_v2(pHandle, pAllocateArray)


def _fits_32_bits(array, call: str) -> None:
    if max(array.sides()) >= 2**32:
        raise _invalid(call, "a side does not fit the 32-bit descriptor of CUDA 2.0's form")


@driver()
def cuArrayGetDescriptor(pArrayDescriptor, hArray):
    """CUDA 2.0's form, with 32-bit sides."""
    _fits_32_bits(array_of(hArray, "cuArrayGetDescriptor"), "cuArrayGetDescriptor")
    return cuArrayGetDescriptor_v2(pArrayDescriptor, hArray)


@driver()
def cuArray3DGetDescriptor(pArrayDescriptor, hArray):
    _fits_32_bits(array_of(hArray, "cuArray3DGetDescriptor"), "cuArray3DGetDescriptor")
    return cuArray3DGetDescriptor_v2(pArrayDescriptor, hArray)


# Sparse, deferred-mapping and multi-planar arrays: the runtime's answers (client/runtime/arrays.py).


@driver()
def cuArrayGetSparseProperties(sparseProperties, array):
    require_initialized()
    out_pointer(sparseProperties, "sparseProperties")
    runtime_arrays.no_sparse_properties(array_of(array, "cuArrayGetSparseProperties"), "cuArrayGetSparseProperties")


@driver()
def cuMipmappedArrayGetSparseProperties(sparseProperties, mipmap):
    require_initialized()
    out_pointer(sparseProperties, "sparseProperties")
    call = "cuMipmappedArrayGetSparseProperties"
    runtime_arrays.no_sparse_properties(array_of(mipmap, call, mipmapped=True), call)


@driver()
def cuArrayGetMemoryRequirements(memoryRequirements, array, device):
    require_initialized()
    out_pointer(memoryRequirements, "memoryRequirements")
    call = "cuArrayGetMemoryRequirements"
    runtime_arrays.no_memory_requirements(array_of(array, call), device, call)


@driver()
def cuMipmappedArrayGetMemoryRequirements(memoryRequirements, mipmap, device):
    require_initialized()
    out_pointer(memoryRequirements, "memoryRequirements")
    call = "cuMipmappedArrayGetMemoryRequirements"
    runtime_arrays.no_memory_requirements(array_of(mipmap, call, mipmapped=True), device, call)


@driver()
def cuArrayGetPlane(pPlaneArray, hArray, planeIdx):
    require_initialized()
    out_pointer(pPlaneArray, "pPlaneArray")
    runtime_arrays.no_plane(array_of(hArray, "cuArrayGetPlane"), "cuArrayGetPlane")


@driver()
def cuArrayGetDescriptor_v2(pArrayDescriptor, hArray):
    require_initialized()
    out = out_pointer(pArrayDescriptor, "pArrayDescriptor")
    array = array_of(hArray, "cuArrayGetDescriptor")
    out.Width, out.Height = array.width, array.height
    out.Format, out.NumChannels = format_number(array.format), array.channels
    return SUCCESS


@driver()
def cuArray3DGetDescriptor_v2(pArrayDescriptor, hArray):
    require_initialized()
    out = out_pointer(pArrayDescriptor, "pArrayDescriptor")
    array = array_of(hArray, "cuArray3DGetDescriptor")
    out.Width, out.Height, out.Depth = array.sides()
    out.Format, out.NumChannels, out.Flags = format_number(array.format), array.channels, array.flags
    return SUCCESS


def _destroy(handle, call: str, free_runtime) -> CUresult:
    """The runtime's free, but NULL is an error, not a no-op."""
    require_initialized()
    if not address(handle):
        raise _invalid(call, "a NULL handle")
    return from_runtime(free_runtime(handle))


@driver()
def cuArrayDestroy(hArray):
    return _destroy(hArray, "cuArrayDestroy", runtime_arrays.cudaFreeArray)


@driver()
def cuMipmappedArrayDestroy(hMipmappedArray):
    return _destroy(hMipmappedArray, "cuMipmappedArrayDestroy", runtime_arrays.cudaFreeMipmappedArray)


# ------------------------------------------------------------------ 1-D copies
# `ByteCount` bytes from a byte offset into an array, row after row (the
# runtime's cudaMemcpyToArray & co.); synchronous ones run in the legacy
# stream, their _ptds exports too.


def _at(array_handle, offset: int, call: str) -> tuple[int, int]:
    """A byte offset into an array as (byte in its row, row)."""
    row_bytes = array_of(array_handle, call).storage()[0]
    return offset % row_bytes, offset // row_bytes


def _linear_copy(array_handle, offset, linear: int, count, kind, to_array: bool, call: str, hStream=None,
                 per_thread=False) -> CUresult:
    require_initialized()
    w_offset, h_offset = _at(array_handle, offset, call)
    stream = None if hStream is None else stream_of(hStream, per_thread)
    boxes.linear_array_copy(array_handle, w_offset, h_offset, linear, count, kind, to_array, stream,
                            hStream is not None, call)
    return SUCCESS


# The copies' CUDA 2.0 forms (no _v2: 32-bit offsets and sizes; cuGetProcAddress
# at a version before 3.2 finds them) are the same calls.

@driver("cuMemcpyHtoA")
@driver(stream_variants=True)
def cuMemcpyHtoA_v2(dstArray, dstOffset, srcHost, ByteCount, per_thread=False):
    return _linear_copy(dstArray, dstOffset, address(srcHost), ByteCount, HOST_TO_DEVICE, True, "cuMemcpyHtoA")


@driver("cuMemcpyAtoH")
@driver(stream_variants=True)
def cuMemcpyAtoH_v2(dstHost, srcArray, srcOffset, ByteCount, per_thread=False):
    return _linear_copy(srcArray, srcOffset, address(dstHost), ByteCount, DEVICE_TO_HOST, False, "cuMemcpyAtoH")


@driver("cuMemcpyHtoAAsync")
@driver(stream_variants=True)
def cuMemcpyHtoAAsync_v2(dstArray, dstOffset, srcHost, ByteCount, hStream, per_thread=False):
    return _linear_copy(dstArray, dstOffset, address(srcHost), ByteCount, HOST_TO_DEVICE, True, "cuMemcpyHtoAAsync",
                        hStream, per_thread)


@driver("cuMemcpyAtoHAsync")
@driver(stream_variants=True)
def cuMemcpyAtoHAsync_v2(dstHost, srcArray, srcOffset, ByteCount, hStream, per_thread=False):
    return _linear_copy(srcArray, srcOffset, address(dstHost), ByteCount, DEVICE_TO_HOST, False, "cuMemcpyAtoHAsync",
                        hStream, per_thread)


@driver(stream_variants=True)
def cuMemcpyDtoA_v2(dstArray, dstOffset, srcDevice, ByteCount, per_thread=False):
    return _linear_copy(dstArray, dstOffset, srcDevice, ByteCount, DEVICE_TO_DEVICE, True, "cuMemcpyDtoA")


@driver(stream_variants=True)
def cuMemcpyAtoD_v2(dstDevice, srcArray, srcOffset, ByteCount, per_thread=False):
    return _linear_copy(srcArray, srcOffset, dstDevice, ByteCount, DEVICE_TO_DEVICE, False, "cuMemcpyAtoD")


@driver("cuMemcpyAtoA")
@driver(stream_variants=True)
def cuMemcpyAtoA_v2(dstArray, dstOffset, srcArray, srcOffset, ByteCount, per_thread=False):
    """The runtime's cudaMemcpyArrayToArray.  The arrays' formats may
    differ, their elements' sizes not."""
    require_initialized()
    call = "cuMemcpyAtoA"
    dst, src = array_of(dstArray, call), array_of(srcArray, call)
    if dst.element_size != src.element_size:
        raise _invalid(call, f"elements of {dst.element_size} and {src.element_size} bytes")
    (dst_x, dst_y), (src_x, src_y) = _at(dstArray, dstOffset, call), _at(srcArray, srcOffset, call)
    return from_runtime(boxes.cudaMemcpyArrayToArray(dstArray, dst_x, dst_y, srcArray, src_x, src_y, ByteCount,
                                                     DEVICE_TO_DEVICE))


# ------------------------------------------------------------------ 3-D peer copies
# A CUDA_MEMCPY3D_PEER is a CUDA_MEMCPY3D with contexts for its reserved
# fields: with unified addressing each side's pointer or array says its GPU.


def _peer_3d(pCopy, call: str) -> None:
    require_initialized()
    copy = out_pointer(pCopy, "pCopy")
    for context, what in ((copy.dstContext, "dstContext"), (copy.srcContext, "srcContext")):
        if context == interposer.ffi.NULL:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT, f"{call}: {what} is NULL")


@driver(stream_variants=True)
def cuMemcpy3DPeer(pCopy, per_thread=False):
    _peer_3d(pCopy, "cuMemcpy3DPeer")
    return driver_memory.cuMemcpy3D_v2(pCopy)


@driver(stream_variants=True)
def cuMemcpy3DPeerAsync(pCopy, hStream, per_thread=False):
    _peer_3d(pCopy, "cuMemcpy3DPeerAsync")
    return driver_memory.cuMemcpy3DAsync_v2(pCopy, hStream, per_thread)


@driver()
def cuDeviceGetTexture1DLinearMaxWidth(maxWidthInElements, format, numChannels, dev):
    require_initialized()
    out_pointer(maxWidthInElements, "maxWidthInElements")
    wire_format(format, numChannels, "cuDeviceGetTexture1DLinearMaxWidth")
    maxWidthInElements[0] = runtime_arrays.texture_1d_linear_max_width(rt().device(dev))
    return SUCCESS
