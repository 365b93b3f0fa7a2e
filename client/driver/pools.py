"""CUDA driver API: memory pools and stream-ordered allocation
(cuMemAllocAsync, cuMemFreeAsync, cuMemAllocFromPoolAsync, cuMemPool*,
cuDevice{Get,Set,GetDefault}MemPool, cuMem{Get,Set,GetDefault}MemPool).

A CUmemoryPool is a cudaMemPool_t (one struct type in the headers) and the
driver's pool structs (CUmemPoolProps, CUmemAccessDesc, CUmemLocation) and
enums (CUmemPool_attribute, CUmemAccess_flags) are the runtime's under other
names, so each function is client/runtime/pools.py's twin, with its
differences from a local GPU: device memory only, shared between processes
of one server's sessions with POSIX file descriptors only.  A CUdeviceptr
is the runtime's device pointer.
"""
from __future__ import annotations

from .. import interposer
from ..runtime import pools as runtime_pools
from ..interposer import address, out_pointer
from .registry import driver, from_runtime, require_initialized
from .streams import check_stream


def _allocated(dptr, allocate) -> int:
    """Run the runtime's allocation `allocate(void **)`; its pointer into *dptr."""
    out_pointer(dptr, "dptr")
    ptr = interposer.ffi.new("void **")
    status = allocate(ptr)
    dptr[0] = address(ptr[0])
    return from_runtime(status)


@driver(stream_variants=True)
def cuMemAllocAsync(dptr, bytesize, hStream, per_thread=False):
    check_stream(hStream, "cuMemAllocAsync")
    return _allocated(dptr, lambda ptr: runtime_pools.cudaMallocAsync(ptr, bytesize, hStream, per_thread))


@driver(stream_variants=True)
def cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream, per_thread=False):
    check_stream(hStream, "cuMemAllocFromPoolAsync")
    return _allocated(dptr, lambda ptr: runtime_pools.cudaMallocFromPoolAsync(ptr, bytesize, pool, hStream,
                                                                              per_thread))


@driver(stream_variants=True)
def cuMemFreeAsync(dptr, hStream, per_thread=False):
    check_stream(hStream, "cuMemFreeAsync")
    return from_runtime(runtime_pools.cudaFreeAsync(interposer.ffi.cast("void *", dptr), hStream, per_thread))


@driver()
def cuDeviceGetDefaultMemPool(pool_out, dev):
    require_initialized()
    return from_runtime(runtime_pools.cudaDeviceGetDefaultMemPool(pool_out, dev))


@driver()
def cuDeviceGetMemPool(pool, dev):
    require_initialized()
    return from_runtime(runtime_pools.cudaDeviceGetMemPool(pool, dev))


@driver()
def cuDeviceSetMemPool(dev, pool):
    require_initialized()
    return from_runtime(runtime_pools.cudaDeviceSetMemPool(dev, pool))


@driver()
def cuMemPoolCreate(pool, poolProps):
    require_initialized()
    return from_runtime(runtime_pools.cudaMemPoolCreate(pool, poolProps))


@driver()
def cuMemPoolDestroy(pool):
    require_initialized()
    return from_runtime(runtime_pools.cudaMemPoolDestroy(pool))


@driver()
def cuMemPoolTrimTo(pool, minBytesToKeep):
    require_initialized()
    return from_runtime(runtime_pools.cudaMemPoolTrimTo(pool, minBytesToKeep))


@driver()
def cuMemPoolSetAttribute(pool, attr, value):
    require_initialized()
    return from_runtime(runtime_pools.cudaMemPoolSetAttribute(pool, attr, value))


@driver()
def cuMemPoolGetAttribute(pool, attr, value):
    require_initialized()
    return from_runtime(runtime_pools.cudaMemPoolGetAttribute(pool, attr, value))


@driver()
def cuMemPoolSetAccess(pool, map, count):  # noqa: A002 - cuda.h's name
    require_initialized()
    return from_runtime(runtime_pools.cudaMemPoolSetAccess(pool, map, count))


@driver()
def cuMemPoolGetAccess(flags, memPool, location):
    require_initialized()
    return from_runtime(runtime_pools.cudaMemPoolGetAccess(flags, memPool, location))


# ------------------------------------------------------------------ by location (CUDA 13)


@driver()
def cuMemGetDefaultMemPool(pool_out, location, type):  # noqa: A002 - cuda.h's name
    """cudaMemGetDefaultMemPool: a device location's pinned pool; host and
    managed pools are CUDA_ERROR_NOT_SUPPORTED (rcuda's pools hold device
    memory only)."""
    require_initialized()
    return from_runtime(runtime_pools.cudaMemGetDefaultMemPool(pool_out, location, type))


@driver()
def cuMemGetMemPool(pool, location, type):  # noqa: A002 - cuda.h's name
    require_initialized()
    return from_runtime(runtime_pools.cudaMemGetMemPool(pool, location, type))


@driver()
def cuMemSetMemPool(location, type, pool):  # noqa: A002 - cuda.h's name
    """For a device location and pinned memory, cuDeviceSetMemPool: the
    pool must be that device's (CUDA_ERROR_INVALID_VALUE otherwise)."""
    require_initialized()
    return from_runtime(runtime_pools.cudaMemSetMemPool(location, type, pool))


# ------------------------------------------------------------------ sharing between processes


@driver()
def cuMemPoolExportToShareableHandle(handle_out, pool, handleType, flags):
    """CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR only: a new descriptor
    naming the pool (client/runtime/pools.py)."""
    require_initialized()
    return from_runtime(runtime_pools.cudaMemPoolExportToShareableHandle(handle_out, pool, handleType, flags))


@driver()
def cuMemPoolImportFromShareableHandle(pool_out, handle, handleType, flags):
    require_initialized()
    return from_runtime(runtime_pools.cudaMemPoolImportFromShareableHandle(pool_out, handle, handleType, flags))


@driver()
def cuMemPoolExportPointer(shareData_out, ptr):
    require_initialized()
    return from_runtime(runtime_pools.cudaMemPoolExportPointer(shareData_out, interposer.ffi.cast("void *", ptr)))


@driver()
def cuMemPoolImportPointer(ptr_out, pool, shareData):
    """cuMemFree or cuMemFreeAsync unmaps what it maps."""
    require_initialized()
    return _allocated(ptr_out, lambda ptr: runtime_pools.cudaMemPoolImportPointer(ptr, pool, shareData))
