"""CUDA runtime functions: memory pools and stream-ordered allocation
(cudaMallocAsync, cudaFreeAsync, cudaMemPool*).

Pools are kept in the client (client/memory/pools.py says how blocks are
reused in stream order and when they go back to the server).  What differs
from a local GPU:
  * pools hold device memory only (no host or managed pools);
  * pools are shared between processes of one server's sessions only, with
    shareable handles of the POSIX file descriptor kind: the descriptor is
    a memfd naming the pool, an exported pointer carries its block's IPC
    export (client/runtime/ipc.py), and a block once exported is given back
    to the server when freed rather than reused;
  * cudaMemPoolSetAccess opens the pool's memory to kernels of another GPU
    of the same server (block by block, on the server); a GPU of another
    server cannot be given access (cudaErrorInvalidDevice), as kernels
    there cannot reach this memory;
  * cudaDeviceReset frees the pools' memory with everything else the
    process had on the device, destroys its created pools and empties its
    default pool (CUDA 13 keeps stream-ordered allocations).
"""
from __future__ import annotations

from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError

from .. import graphs, interposer
from . import ipc
from .core import SUCCESS, cuda
from ..interposer import address, out_pointer, stream_of
from .memory import cudaFree, graph_memory

ATTRS = ENUMS["cudaMemPoolAttr"]
LOCATIONS = ENUMS["cudaMemLocationType"]
LOCATION_DEVICE = LOCATIONS["cudaMemLocationTypeDevice"]
LOCATIONS_ON_HOST = {LOCATIONS[name] for name in ("cudaMemLocationTypeHost", "cudaMemLocationTypeHostNuma",
                                                  "cudaMemLocationTypeHostNumaCurrent")}
ALLOCATION_PINNED = ENUMS["cudaMemAllocationType"]["cudaMemAllocationTypePinned"]
ALLOCATION_MANAGED = ENUMS["cudaMemAllocationType"]["cudaMemAllocationTypeManaged"]
HANDLE_TYPES = ENUMS["cudaMemAllocationHandleType"]
POSIX_FD = HANDLE_TYPES["cudaMemHandleTypePosixFileDescriptor"]
ACCESS_FLAGS = ENUMS["cudaMemAccessFlags"]
READ_WRITE = ACCESS_FLAGS["cudaMemAccessFlagsProtReadWrite"]
NO_ACCESS = ACCESS_FLAGS["cudaMemAccessFlagsProtNone"]

#: cudaMemPoolAttr -> (MemoryPool field, C type of the value, settable)
POOL_ATTRIBUTES = {
    ATTRS["cudaMemPoolReuseFollowEventDependencies"]: ("follow_event_dependencies", "int *", True),
    ATTRS["cudaMemPoolReuseAllowOpportunistic"]: ("allow_opportunistic", "int *", True),
    ATTRS["cudaMemPoolReuseAllowInternalDependencies"]: ("allow_internal_dependencies", "int *", True),
    ATTRS["cudaMemPoolAttrReleaseThreshold"]: ("release_threshold", "uint64_t *", True),
    ATTRS["cudaMemPoolAttrReservedMemCurrent"]: ("reserved", "uint64_t *", False),
    ATTRS["cudaMemPoolAttrReservedMemHigh"]: ("reserved_high", "uint64_t *", True),
    ATTRS["cudaMemPoolAttrUsedMemCurrent"]: ("used", "uint64_t *", False),
    ATTRS["cudaMemPoolAttrUsedMemHigh"]: ("used_high", "uint64_t *", True),
}
#: A high watermark can only be reset, to the current value.
WATERMARKS = {"reserved_high": "reserved", "used_high": "used"}


def rt():
    return interposer.rt


def _handle(pool) -> object:
    return interposer.ffi.cast("cudaMemPool_t", pool.handle)


def _pool(memPool, call: str):
    return rt().pools.pool(address(memPool), call)


def _location_device(location, call: str):
    """The device a cudaMemLocation names; only devices hold pools here."""
    out_pointer(location, "location")
    if location.type in LOCATIONS_ON_HOST:
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"{call}: location type {location.type}: rcuda's pools are on devices only")
    if location.type != LOCATION_DEVICE:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: location type {location.type}")
    if not 0 <= location.id < len(rt().devices):
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: device {location.id} does not exist ({len(rt().devices)} visible)")
    return rt().device(location.id)


# ------------------------------------------------------------------ allocation


def _allocate(devPtr, size: int, pool, stream, call: str) -> int:
    out_pointer(devPtr, "devPtr")
    pool.device._check_usable(call)  # a reused block needs no round trip: a sticky error must still tell
    capture = rt().captures.of(stream)
    if capture is not None:  # a memory alloc node (client/capture.py)
        block = graph_memory(stream.device, size, call)
        capture.graph.memory.append(block)
        capture.add(stream, graphs.MEM_ALLOC, {"ptr": block.ptr, "size": size, "device": stream.device})
        devPtr[0] = interposer.ffi.cast("void *", block.ptr)
        return SUCCESS
    devPtr[0] = interposer.ffi.cast("void *", rt().pools.allocate(pool, size, stream) if size else 0)
    return SUCCESS


@cuda(stream_variants=True)
def cudaMallocAsync(devPtr, size, hStream, per_thread=False):
    """From the current pool of the stream's device (cudaDeviceSetMemPool)."""
    stream = stream_of(hStream, per_thread)
    return _allocate(devPtr, size, rt().pools.current(stream.device), stream, "cudaMallocAsync")


@cuda(stream_variants=True)
def cudaMallocFromPoolAsync(ptr, size, memPool, stream, per_thread=False):
    pool = _pool(memPool, "cudaMallocFromPoolAsync")
    if pool.imported:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        "cudaMallocFromPoolAsync: an imported pool cannot allocate (another process's)")
    return _allocate(ptr, size, pool, stream_of(stream, per_thread), "cudaMallocFromPoolAsync")


@cuda(stream_variants=True)
def cudaFreeAsync(devPtr, hStream, per_thread=False):
    """Pool memory goes back to its pool in the stream's order; memory from
    cudaMalloc is freed by the server after the work sent before it."""
    stream = stream_of(hStream, per_thread)
    ptr = address(devPtr)
    capture = rt().captures.of(stream)
    if capture is not None:  # a memory free node (client/capture.py)
        if ptr not in rt().graphs.memory:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cudaFreeAsync of {ptr:#x} in a capture: not memory a graph allocated")
        capture.add(stream, graphs.MEM_FREE, {"ptr": ptr})
        return SUCCESS
    if ptr in rt().graphs.memory:  # its use ends; the memory stays for the graph's next launch
        return SUCCESS
    if rt().pools.owner(ptr) is None:
        return cudaFree(devPtr)
    rt().pools.free(ptr, stream)
    return SUCCESS


# ------------------------------------------------------------------ pools


@cuda()
def cudaDeviceGetDefaultMemPool(memPool, device):
    out_pointer(memPool, "memPool")
    memPool[0] = _handle(rt().pools.default(rt().device(device)))
    return SUCCESS


@cuda()
def cudaDeviceGetMemPool(memPool, device):
    out_pointer(memPool, "memPool")
    memPool[0] = _handle(rt().pools.current(rt().device(device)))
    return SUCCESS


@cuda()
def cudaDeviceSetMemPool(device, memPool):
    rt().pools.set_current(rt().device(device), _pool(memPool, "cudaDeviceSetMemPool"))
    return SUCCESS


@cuda()
def cudaMemGetDefaultMemPool(memPool, location, type_):
    out_pointer(memPool, "memPool")
    _check_pinned(type_, "cudaMemGetDefaultMemPool")
    memPool[0] = _handle(rt().pools.default(_location_device(location, "cudaMemGetDefaultMemPool")))
    return SUCCESS


@cuda()
def cudaMemGetMemPool(memPool, location, type_):
    out_pointer(memPool, "memPool")
    _check_pinned(type_, "cudaMemGetMemPool")
    memPool[0] = _handle(rt().pools.current(_location_device(location, "cudaMemGetMemPool")))
    return SUCCESS


@cuda()
def cudaMemSetMemPool(location, type_, memPool):
    _check_pinned(type_, "cudaMemSetMemPool")
    device = _location_device(location, "cudaMemSetMemPool")
    rt().pools.set_current(device, _pool(memPool, "cudaMemSetMemPool"))
    return SUCCESS


def _check_pinned(allocation_type: int, call: str) -> None:
    if allocation_type == ALLOCATION_MANAGED:
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"{call}: managed memory pools: rcuda's pools hold device memory only")
    if allocation_type != ALLOCATION_PINNED:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: allocation type {allocation_type}")


@cuda()
def cudaMemPoolCreate(memPool, poolProps):
    out_pointer(memPool, "memPool")
    props = out_pointer(poolProps, "poolProps")
    _check_pinned(props.allocType, "cudaMemPoolCreate")
    device = _location_device(props.location, "cudaMemPoolCreate")
    if props.handleTypes & ~device.properties.get("memoryPoolSupportedHandleTypes", 0):
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"cudaMemPoolCreate: handle types {props.handleTypes:#x}: {device.label} shares pools "
                        f"with handles of types {device.properties.get('memoryPoolSupportedHandleTypes', 0):#x} "
                        f"only (cudaMemHandleTypePosixFileDescriptor, between sessions of a sim server)")
    if props.usage:
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"cudaMemPoolCreate: usage {props.usage:#x}: rcuda's pools do not decompress")
    memPool[0] = _handle(rt().pools.create(device, props.maxSize, props.handleTypes))
    return SUCCESS


@cuda()
def cudaMemPoolDestroy(memPool):
    rt().pools.destroy(_pool(memPool, "cudaMemPoolDestroy"))
    return SUCCESS


@cuda()
def cudaMemPoolTrimTo(memPool, minBytesToKeep):
    rt().pools.trim(_pool(memPool, "cudaMemPoolTrimTo"), minBytesToKeep)
    return SUCCESS


def _attribute(attr: int, value, call: str):
    out_pointer(value, "value")
    found = POOL_ATTRIBUTES.get(attr)
    if found is None:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {attr} is not a cudaMemPoolAttr")
    name, c_type, settable = found
    return name, interposer.ffi.cast(c_type, value), settable


@cuda()
def cudaMemPoolGetAttribute(memPool, attr, value):
    pool = _pool(memPool, "cudaMemPoolGetAttribute")
    name, target, _ = _attribute(attr, value, "cudaMemPoolGetAttribute")
    target[0] = int(getattr(pool, name))
    return SUCCESS


@cuda()
def cudaMemPoolSetAttribute(memPool, attr, value):
    pool = _pool(memPool, "cudaMemPoolSetAttribute")
    name, source, settable = _attribute(attr, value, "cudaMemPoolSetAttribute")
    if not settable:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaMemPoolSetAttribute: {name} is read-only")
    if name in WATERMARKS:
        if source[0] != 0:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            "cudaMemPoolSetAttribute: a high watermark can only be reset, with 0")
        setattr(pool, name, getattr(pool, WATERMARKS[name]))
    elif name == "release_threshold":
        pool.release_threshold = source[0]
    else:
        setattr(pool, name, bool(source[0]))
    rt().pools.changed()
    return SUCCESS


# ------------------------------------------------------------------ access


@cuda()
def cudaMemPoolSetAccess(memPool, descList, count):
    pool = _pool(memPool, "cudaMemPoolSetAccess")
    if count and descList == interposer.ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaMemPoolSetAccess: descList is NULL, count {count}")
    changes = {}
    for i in range(count):  # all checked before any is applied
        desc = descList[i]
        device = _location_device(desc.location, "cudaMemPoolSetAccess")
        flags = desc.flags
        if flags not in ACCESS_FLAGS.values():
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaMemPoolSetAccess: access flags {flags}")
        if device is pool.device:
            if flags != READ_WRITE:
                raise CudaError(cudaError.cudaErrorInvalidDevice,
                                f"cudaMemPoolSetAccess: {device.label} owns the pool; its access is always "
                                f"read-write")
            continue
        if device.session is not pool.device.session and flags != NO_ACCESS:
            raise CudaError(cudaError.cudaErrorInvalidDevice,
                            f"cudaMemPoolSetAccess: {device.label} is on another server than the pool's "
                            f"{pool.device.label}: its kernels cannot reach that memory")
        changes[device] = flags
    rt().pools.set_access(pool, changes)
    return SUCCESS


@cuda()
def cudaMemPoolGetAccess(flags, memPool, location):
    out_pointer(flags, "flags")
    pool = _pool(memPool, "cudaMemPoolGetAccess")
    device = _location_device(location, "cudaMemPoolGetAccess")
    flags[0] = READ_WRITE if device is pool.device else pool.access.get(device, NO_ACCESS)
    return SUCCESS


# ------------------------------------------------------------------ sharing between processes


def _shareable_type(handle_type: int, call: str) -> None:
    if handle_type != POSIX_FD:
        status = cudaError.cudaErrorNotSupported if handle_type in HANDLE_TYPES.values() and handle_type \
            else cudaError.cudaErrorInvalidValue
        raise CudaError(status, f"{call}: handle type {handle_type}: rcuda shares pools as POSIX file "
                                f"descriptors only (cudaMemHandleTypePosixFileDescriptor)")


@cuda()
def cudaMemPoolExportToShareableHandle(shareableHandle, memPool, handleType, flags):
    """The handle is a new file descriptor (the program closes it) of a
    sealed memfd naming the pool; another process of a session of the same
    server imports it."""
    call = "cudaMemPoolExportToShareableHandle"
    out_pointer(shareableHandle, "shareableHandle")
    pool = _pool(memPool, call)
    if flags:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: flags {flags:#x} (must be 0)")
    if pool.imported or not pool.handle_types & handleType or handleType != POSIX_FD:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: handle type {handleType}: the pool was created with handle types "
                        f"{pool.handle_types:#x}" + (" (an imported pool)" if pool.imported else ""))
    interposer.ffi.cast("int *", shareableHandle)[0] = ipc.pool_handle(pool.device, pool.share_id)
    return SUCCESS


@cuda()
def cudaMemPoolImportFromShareableHandle(memPool, shareableHandle, handleType, flags):
    """A pool of this process that maps the exporter's pointers
    (cudaMemPoolImportPointer) and never allocates.  The descriptor stays
    the program's."""
    call = "cudaMemPoolImportFromShareableHandle"
    out_pointer(memPool, "memPool")
    if flags:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: flags {flags:#x} (must be 0)")
    _shareable_type(handleType, call)
    device, share_id = ipc.read_pool_handle(address(shareableHandle), call)
    memPool[0] = _handle(rt().pools.import_pool(device, share_id, call))
    return SUCCESS


@cuda()
def cudaMemPoolExportPointer(exportData, ptr):
    """64 bytes naming the block at `ptr` of a shareable pool: its IPC
    export (server/ipc.py).  From now on the block is not reused: freed,
    it goes back to the server, and its export with it."""
    call = "cudaMemPoolExportPointer"
    out_pointer(exportData, "exportData")
    pool, block = rt().pools.exported_block(address(ptr), call)
    raw = ipc.export_block(block.base, pool.share_id)
    interposer.ffi.memmove(exportData, raw, len(raw))
    return SUCCESS


@cuda()
def cudaMemPoolImportPointer(ptr, memPool, exportData):
    """The exporter's block, mapped here (the same pointer again if imported
    before, counted); cudaFree or cudaFreeAsync unmaps it.  A stale export
    (freed, or its process gone) is cudaErrorInvalidValue."""
    call = "cudaMemPoolImportPointer"
    out_pointer(ptr, "ptr")
    out_pointer(exportData, "exportData")
    pool = _pool(memPool, call)
    if not pool.imported:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: the pool is this process's own, not one cudaMemPoolImportFromShareableHandle "
                        f"returned")
    raw = bytes(interposer.ffi.buffer(interposer.ffi.cast("char *", exportData), ipc.POINTER.size))
    ptr[0] = interposer.ffi.cast("void *", ipc.import_block(raw, pool.device, pool.share_id, call))
    return SUCCESS
