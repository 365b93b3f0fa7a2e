"""CUDA driver API: device, pinned and managed memory, copies and memsets.

The runtime's memory, behind the driver's names: a CUdeviceptr is a runtime
device pointer, so everything here goes through client/runtime/memory.py (one
allocation map, the same copy paths, pinned and mapped host memory) and
client/memory/managed.py.  The driver's copies say where each side is
(HtoD, DtoH...), or, for cuMemcpy and CU_MEMORYTYPE_UNIFIED, leave it to the
pointers as cudaMemcpyDefault does.  The current context's device is the
runtime's current device.

2-D and 3-D copies are the runtime's boxes (client/runtime/boxes.py), CUDA
arrays included (CU_MEMORYTYPE_ARRAY).  Not here: the legacy 32-bit exports
(cuMemAlloc, cuMemcpyHtoD...: CUDA 3.2's ABI).
"""
from __future__ import annotations

from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..runtime import boxes
from ..runtime import core as runtime_core
from ..runtime import ipc as runtime_ipc
from ..runtime import memory as runtime_memory
from ..interposer import address, out_pointer, stream_of
from .registry import SUCCESS, driver, require_initialized
from ..runtime.memory import DEFAULT, DEVICE_TO_DEVICE, DEVICE_TO_HOST, HOST_TO_DEVICE

#: cuMemHostAlloc's CU_MEMHOSTALLOC_* flags (the runtime's cudaHostAlloc* values).
HOST_ALLOC_FLAGS = 0x7
#: cuMemAllocPitch's element sizes: what a kernel may read at once.
PITCH_ELEMENT_SIZES = (4, 8, 16)


def rt():
    return interposer.rt


def _invalid(call: str, why: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {why}")


# ------------------------------------------------------------------ allocation


@driver()
def cuMemAlloc_v2(dptr, bytesize):
    require_initialized()
    out_pointer(dptr, "dptr")
    if bytesize == 0:
        raise _invalid("cuMemAlloc", "bytesize is 0")
    rt().captures.check_unsafe("cuMemAlloc")  # as cudaMalloc: refused while a global capture runs
    dptr[0] = runtime_memory.allocate(rt().device(), bytesize)
    return SUCCESS


@driver()
def cuMemFree_v2(dptr):
    """The runtime's cudaFree: device, pool or managed memory."""
    require_initialized()
    runtime_memory.cudaFree(interposer.ffi.cast("void *", dptr))
    return SUCCESS


@driver()
def cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes):
    require_initialized()
    out_pointer(dptr, "dptr")
    out_pointer(pPitch, "pPitch")
    if ElementSizeBytes not in PITCH_ELEMENT_SIZES:
        raise _invalid("cuMemAllocPitch", f"ElementSizeBytes must be 4, 8 or 16, not {ElementSizeBytes}")
    if WidthInBytes == 0 or Height == 0:
        raise _invalid("cuMemAllocPitch", f"a {WidthInBytes} x {Height} allocation")
    dptr[0], pPitch[0] = runtime_memory.allocate_pitched(rt().device(), WidthInBytes, Height)
    return SUCCESS


@driver()
def cuMemGetInfo_v2(free, total):
    require_initialized()
    return _status(runtime_memory.cudaMemGetInfo(free, total))


@driver()
def cuMemGetAddressRange_v2(pbase, psize, dptr):
    """The allocation holding `dptr`; either output may be NULL."""
    require_initialized()
    allocation = rt().allocations.find(dptr)
    if allocation is None:
        raise DriverError(CUresult.CUDA_ERROR_NOT_FOUND, f"cuMemGetAddressRange: {dptr:#x} is in no allocation")
    if pbase != interposer.ffi.NULL:
        pbase[0] = allocation.base
    if psize != interposer.ffi.NULL:
        psize[0] = allocation.size
    return SUCCESS


@driver()
def cuMemAllocManaged(dptr, bytesize, flags):
    """The runtime's managed memory (client/memory/managed.py), on the current device."""
    require_initialized()
    out_pointer(dptr, "dptr")
    if bytesize == 0:
        raise _invalid("cuMemAllocManaged", "bytesize is 0")
    dptr[0] = rt().managed.allocate(rt(), rt().device(), bytesize, flags)
    return SUCCESS


# ------------------------------------------------------------------ pinned host memory


@driver("cuMemAllocHost_v2", "cuMemAllocHost")  # and CUDA 2.0's form (a 32-bit size)
def cuMemAllocHost_v2(pp, bytesize):
    return cuMemHostAlloc(pp, bytesize, 0)


@driver()
def cuMemHostAlloc(pp, bytesize, Flags):
    """cudaHostAlloc's memory: CU_MEMHOSTALLOC_DEVICEMAP makes a mirror on the
    current device (client/memory/mapped.py)."""
    require_initialized()
    if Flags & ~HOST_ALLOC_FLAGS:
        raise _invalid("cuMemHostAlloc", f"unknown flags {Flags:#x}")
    if bytesize == 0:
        raise _invalid("cuMemHostAlloc", "bytesize is 0")
    return _status(runtime_memory.cudaHostAlloc(pp, bytesize, Flags))


@driver()
def cuMemFreeHost(p):
    require_initialized()
    if rt().host_memory.find(address(p)) is None:
        raise _invalid("cuMemFreeHost", f"{address(p):#x} is not pinned host memory")
    return _status(runtime_memory.cudaFreeHost(p))


@driver("cuMemHostRegister_v2", "cuMemHostRegister")  # and CUDA 4.0's form
def cuMemHostRegister_v2(p, bytesize, Flags):
    require_initialized()
    return _status(runtime_memory.cudaHostRegister(p, bytesize, Flags))


@driver()
def cuMemHostUnregister(p):
    require_initialized()
    return _status(runtime_memory.cudaHostUnregister(p))


@driver()
def cuMemHostGetDevicePointer_v2(pdptr, p, Flags):
    require_initialized()
    out_pointer(pdptr, "pdptr")
    pdptr[0] = runtime_memory.mapped_device_pointer(address(p), Flags)
    return SUCCESS


@driver()
def cuMemHostGetFlags(pFlags, p):
    require_initialized()
    return _status(runtime_memory.cudaHostGetFlags(pFlags, p))


def _status(runtime_status) -> CUresult:
    """A runtime function's success as the driver's (failures raise)."""
    assert runtime_status == runtime_core.SUCCESS, runtime_status
    return SUCCESS


# ------------------------------------------------------------------ 1-D copies
# Synchronous copies run in the legacy stream, their _ptds exports too, as
# the runtime's cudaMemcpy_ptds does here.


def _copy(dst: int, src: int, count: int, kind: int, hStream=None, per_thread: bool = False) -> CUresult:
    require_initialized()
    stream = None if hStream is None else stream_of(hStream, per_thread)
    runtime_memory.memcpy(dst, src, count, kind, stream, asynchronous=hStream is not None)
    return SUCCESS


@driver(stream_variants=True)
def cuMemcpy(dst, src, ByteCount, per_thread=False):
    return _copy(dst, src, ByteCount, DEFAULT)


@driver(stream_variants=True)
def cuMemcpyAsync(dst, src, ByteCount, hStream, per_thread=False):
    return _copy(dst, src, ByteCount, DEFAULT, hStream, per_thread)


@driver(stream_variants=True)
def cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount, per_thread=False):
    return _copy(dstDevice, address(srcHost), ByteCount, HOST_TO_DEVICE)


@driver(stream_variants=True)
def cuMemcpyHtoDAsync_v2(dstDevice, srcHost, ByteCount, hStream, per_thread=False):
    return _copy(dstDevice, address(srcHost), ByteCount, HOST_TO_DEVICE, hStream, per_thread)


@driver(stream_variants=True)
def cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount, per_thread=False):
    return _copy(address(dstHost), srcDevice, ByteCount, DEVICE_TO_HOST)


@driver(stream_variants=True)
def cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream, per_thread=False):
    return _copy(address(dstHost), srcDevice, ByteCount, DEVICE_TO_HOST, hStream, per_thread)


@driver(stream_variants=True)
def cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount, per_thread=False):
    return _copy(dstDevice, srcDevice, ByteCount, DEVICE_TO_DEVICE)


@driver(stream_variants=True)
def cuMemcpyDtoDAsync_v2(dstDevice, srcDevice, ByteCount, hStream, per_thread=False):
    return _copy(dstDevice, srcDevice, ByteCount, DEVICE_TO_DEVICE, hStream, per_thread)


def _peer_copy(dst, dstContext, src, srcContext, count, hStream=None, per_thread=False) -> CUresult:
    """With unified addressing the pointers say which GPU each side is on:
    a copy between GPUs goes server to server (client/transport/peer.py)."""
    for context, what in ((dstContext, "dstContext"), (srcContext, "srcContext")):
        if context == interposer.ffi.NULL:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT, f"cuMemcpyPeer: {what} is NULL")
    return _copy(dst, src, count, DEVICE_TO_DEVICE, hStream, per_thread)


@driver(stream_variants=True)
def cuMemcpyPeer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, per_thread=False):
    return _peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount)


@driver(stream_variants=True)
def cuMemcpyPeerAsync(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, per_thread=False):
    return _peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, per_thread)


# ------------------------------------------------------------------ batches of copies
# The runtime's cudaMemcpyBatchAsync (client/runtime/memory.py): the same
# arguments, CUdeviceptr arrays for void * ones.  CUDA 12.8's
# cuMemcpyBatchAsync (and _ptsz) also returns failIdx: on failure, the index
# of the copy at fault, or SIZE_MAX where no copy in particular is.
# cuMemcpy3DBatchAsync (CUDA 12.8's, with failIdx) and its _v2 are the
# runtime's boxes (client/runtime/boxes.py, batch_3d).


def _batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, per_thread: bool, failIdx=None):
    require_initialized()
    try:
        runtime_memory.batch_from_c(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, per_thread,
                                    "cuMemcpyBatchAsync")
    except CudaError as exc:
        if failIdx is not None and failIdx != interposer.ffi.NULL:
            failIdx[0] = getattr(exc, "index", runtime_memory.NO_COPY)
        raise
    return SUCCESS


def _batch_3d(opList, numOps, flags, hStream, per_thread: bool, failIdx=None) -> CUresult:
    require_initialized()
    try:
        boxes.batch_3d(opList, numOps, flags, stream_of(hStream, per_thread), "cuMemcpy3DBatchAsync")
    except CudaError as exc:
        if failIdx is not None and failIdx != interposer.ffi.NULL:
            failIdx[0] = getattr(exc, "index", runtime_memory.NO_COPY)
        raise
    return SUCCESS


@driver(stream_variants=True)
def cuMemcpy3DBatchAsync(numOps, opList, failIdx, flags, hStream, per_thread=False):
    return _batch_3d(opList, numOps, flags, hStream, per_thread, failIdx)


@driver(stream_variants=True)
def cuMemcpy3DBatchAsync_v2(numOps, opList, flags, hStream, per_thread=False):
    return _batch_3d(opList, numOps, flags, hStream, per_thread)


@driver(stream_variants=True)
def cuMemcpyBatchAsync(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, per_thread=False):
    """CUDA 12.8's signature, with failIdx."""
    return _batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, per_thread, failIdx)


@driver(stream_variants=True)
def cuMemcpyBatchAsync_v2(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, per_thread=False):
    return _batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream, per_thread)


# ------------------------------------------------------------------ 2-D and 3-D copies


def _side(copy, prefix: str, extent, call: str) -> boxes.Side:
    """One side of a CUDA_MEMCPY2D/3D: host or device memory with its
    pitch (and rows per slice), or a CUDA array, the X/Y(/Z) offsets applied."""
    lib = interposer.lib
    kind = getattr(copy, prefix + "MemoryType")
    x, y = getattr(copy, prefix + "XInBytes"), getattr(copy, prefix + "Y")
    z = getattr(copy, prefix + "Z", 0)
    what = f"{call}: {'destination' if prefix == 'dst' else 'source'}"
    if kind == lib.CU_MEMORYTYPE_ARRAY:
        handle = address(getattr(copy, prefix + "Array"))
        if not handle:
            raise _invalid(call, f"{prefix}Array is NULL")
        if getattr(copy, prefix + "LOD", 0):
            raise _invalid(call, f"{prefix}LOD must be 0")
        return boxes.array_side(rt().arrays.get(handle, what), x, y, z, extent, what)
    pitch = getattr(copy, prefix + "Pitch")
    rows = getattr(copy, prefix + "Height", extent[1])
    if kind == lib.CU_MEMORYTYPE_HOST:
        base, on_device = address(getattr(copy, prefix + "Host")), False
    elif kind in (lib.CU_MEMORYTYPE_DEVICE, lib.CU_MEMORYTYPE_UNIFIED):
        base, on_device = getattr(copy, prefix + "Device"), kind == lib.CU_MEMORYTYPE_DEVICE or None
    else:
        raise _invalid(call, f"{prefix}MemoryType {kind}")
    return boxes.linear_side(base + (z * rows + y) * pitch + x, pitch, rows, extent, on_device, what)


def _copy_2d(pCopy, hStream, per_thread: bool, call: str, depth: bool = False) -> CUresult:
    """cuMemcpy2D/3D: one box, whatever its sides (client/runtime/boxes.py)."""
    require_initialized()
    out_pointer(pCopy, "pCopy")
    copy = pCopy[0]
    extent = (copy.WidthInBytes, copy.Height, copy.Depth if depth else 1)
    dst, src = _side(copy, "dst", extent, call), _side(copy, "src", extent, call)
    stream = None if hStream is None else stream_of(hStream, per_thread)
    boxes.copy_box(dst, src, extent, stream, hStream is not None, call)
    return SUCCESS


@driver(stream_variants=True)
def cuMemcpy2D_v2(pCopy, per_thread=False):
    return _copy_2d(pCopy, None, per_thread, "cuMemcpy2D")


@driver(stream_variants=True)
def cuMemcpy2DUnaligned_v2(pCopy, per_thread=False):
    """rcuda's 2-D copies take any pitch: the same as cuMemcpy2D."""
    return _copy_2d(pCopy, None, per_thread, "cuMemcpy2DUnaligned")


@driver(stream_variants=True)
def cuMemcpy2DAsync_v2(pCopy, hStream, per_thread=False):
    return _copy_2d(pCopy, hStream, per_thread, "cuMemcpy2DAsync")


@driver(stream_variants=True)
def cuMemcpy3D_v2(pCopy, per_thread=False):
    return _copy_2d(pCopy, None, per_thread, "cuMemcpy3D", depth=True)


@driver(stream_variants=True)
def cuMemcpy3DAsync_v2(pCopy, hStream, per_thread=False):
    return _copy_2d(pCopy, hStream, per_thread, "cuMemcpy3DAsync", depth=True)


# ------------------------------------------------------------------ memsets
# cuMemsetD16/D32 write 2- and 4-byte patterns on the server (the memset
# op's elem); their destination must be aligned to the pattern.


def _set(ptr: int, value: int, count: int, elem: int, hStream=None, per_thread=False,
         pitch: int | None = None, height: int = 1) -> CUresult:
    require_initialized()
    if ptr % elem or (pitch is not None and pitch % elem):
        raise _invalid(f"cuMemsetD{8 * elem}", f"{ptr:#x} (pitch {pitch}) is not aligned to {elem} bytes")
    stream = None if hStream is None else stream_of(hStream, per_thread)
    asynchronous = hStream is not None
    if pitch is None:
        runtime_memory.memset(ptr, value, count * elem, stream, asynchronous, elem)
    else:
        boxes.memset_box(ptr, pitch, height, value, (count * elem, height, 1), stream, asynchronous, elem,
                         f"cuMemsetD2D{8 * elem}")
    return SUCCESS


@driver(stream_variants=True)
def cuMemsetD8_v2(dstDevice, uc, N, per_thread=False):
    return _set(dstDevice, uc, N, 1)


@driver(stream_variants=True)
def cuMemsetD16_v2(dstDevice, us, N, per_thread=False):
    return _set(dstDevice, us, N, 2)


@driver(stream_variants=True)
def cuMemsetD32_v2(dstDevice, ui, N, per_thread=False):
    return _set(dstDevice, ui, N, 4)


@driver(stream_variants=True)
def cuMemsetD8Async(dstDevice, uc, N, hStream, per_thread=False):
    return _set(dstDevice, uc, N, 1, hStream, per_thread)


@driver(stream_variants=True)
def cuMemsetD16Async(dstDevice, us, N, hStream, per_thread=False):
    return _set(dstDevice, us, N, 2, hStream, per_thread)


@driver(stream_variants=True)
def cuMemsetD32Async(dstDevice, ui, N, hStream, per_thread=False):
    return _set(dstDevice, ui, N, 4, hStream, per_thread)


@driver(stream_variants=True)
def cuMemsetD2D8_v2(dstDevice, dstPitch, uc, Width, Height, per_thread=False):
    return _set(dstDevice, uc, Width, 1, pitch=dstPitch, height=Height)


@driver(stream_variants=True)
def cuMemsetD2D16_v2(dstDevice, dstPitch, us, Width, Height, per_thread=False):
    return _set(dstDevice, us, Width, 2, pitch=dstPitch, height=Height)


@driver(stream_variants=True)
def cuMemsetD2D32_v2(dstDevice, dstPitch, ui, Width, Height, per_thread=False):
    return _set(dstDevice, ui, Width, 4, pitch=dstPitch, height=Height)


@driver(stream_variants=True)
def cuMemsetD2D8Async(dstDevice, dstPitch, uc, Width, Height, hStream, per_thread=False):
    return _set(dstDevice, uc, Width, 1, hStream, per_thread, dstPitch, Height)


@driver(stream_variants=True)
def cuMemsetD2D16Async(dstDevice, dstPitch, us, Width, Height, hStream, per_thread=False):
    return _set(dstDevice, us, Width, 2, hStream, per_thread, dstPitch, Height)


@driver(stream_variants=True)
def cuMemsetD2D32Async(dstDevice, dstPitch, ui, Width, Height, hStream, per_thread=False):
    return _set(dstDevice, ui, Width, 4, hStream, per_thread, dstPitch, Height)


# ------------------------------------------------------------------ IPC (client/runtime/ipc.py)


@driver()
def cuIpcGetMemHandle(pHandle, dptr):
    require_initialized()
    out_pointer(pHandle, "pHandle")
    raw = runtime_ipc.get_handle(dptr, "cuIpcGetMemHandle")
    interposer.ffi.memmove(pHandle, raw, len(raw))
    return SUCCESS


@driver("cuIpcOpenMemHandle_v2", "cuIpcOpenMemHandle")
def cuIpcOpenMemHandle_v2(pdptr, handle, Flags):
    require_initialized()
    out_pointer(pdptr, "pdptr")
    raw = bytes(interposer.ffi.buffer(interposer.ffi.addressof(handle), runtime_ipc.HANDLE.size))
    pdptr[0] = runtime_ipc.open_handle(raw, Flags, "cuIpcOpenMemHandle")
    return SUCCESS


@driver()
def cuIpcCloseMemHandle(dptr):
    require_initialized()
    runtime_ipc.close_handle(dptr, "cuIpcCloseMemHandle")
    return SUCCESS


@driver()
def cuIpcGetEventHandle(pHandle, event):
    require_initialized()
    out_pointer(pHandle, "pHandle")
    raw = runtime_ipc.get_event_handle(interposer.address(event), "cuIpcGetEventHandle")
    interposer.ffi.memmove(pHandle, raw, len(raw))
    return SUCCESS


@driver()
def cuIpcOpenEventHandle(phEvent, handle):
    require_initialized()
    out_pointer(phEvent, "phEvent")
    raw = bytes(interposer.ffi.buffer(interposer.ffi.addressof(handle), runtime_ipc.EVENT_HANDLE.size))
    phEvent[0] = interposer.ffi.cast("CUevent", runtime_ipc.open_event_handle(raw, "cuIpcOpenEventHandle"))
    return SUCCESS
