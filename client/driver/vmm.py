"""CUDA driver API: virtual memory management (cuMemAddressReserve,
cuMemCreate, cuMemMap, cuMemSetAccess and their kin).

Reservations are the client's (client/memory/virtual.py); physical memory
and mappings are the server's (vmm_create, vmm_map...: the cupy backend
makes the same driver calls at the same addresses, the sim maps a view of
the physical allocation's bytes).  A mapping is an allocation of its
physical memory's GPU for every other call.  cuMemSetAccess lets kernels
of another GPU of the same server use a mapping (mem_access, as memory
pools do); the owning GPU can use it from cuMemMap on, and a GPU of
another server cannot reach it (CUDA_ERROR_INVALID_DEVICE).  Physical
memory made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is shared with
another process of the same server as IPC memory is (client/runtime/ipc.py):
the descriptor cuMemExportToShareableHandle gives names its export.
"""
from __future__ import annotations

from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..interposer import address, out_pointer
from ..runtime import ipc as runtime_ipc
from .registry import SUCCESS, driver, require_initialized
from .handles import handles
from ..memory.virtual import Mapping, PhysicalAllocation

#: CUmemAccess_flags a mapping may be given (none, read, read-write).
ACCESS_FLAGS = (0, 1, 3)
#: cuMemGetAllocationGranularity's options: CU_MEM_ALLOC_GRANULARITY_MINIMUM, _RECOMMENDED.
GRANULARITY_OPTIONS = (0, 1)
#: CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: the one shareable handle type rcuda gives.
POSIX_FD = 1


def rt():
    return interposer.rt


def _invalid(call: str, why: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {why}")


def _device_of_location(location, call: str):
    """The GPU a CUmemLocation names (only device locations are supported)."""
    if location.type != interposer.lib.CU_MEM_LOCATION_TYPE_DEVICE:
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"{call}: location type {location.type}: rcuda's GPUs hold device memory only")
    return rt().device(location.id)


def _device_of_prop(prop, call: str):
    """The GPU of a CUmemAllocationProp, checked as cuMemCreate checks it."""
    out_pointer(prop, "prop")
    if prop.type != interposer.lib.CU_MEM_ALLOCATION_TYPE_PINNED:
        raise _invalid(call, f"allocation type {prop.type} (CU_MEM_ALLOCATION_TYPE_PINNED is the one type)")
    device = _device_of_location(prop.location, call)
    if prop.requestedHandleTypes & ~_handle_types(device):
        raise CudaError(cudaError.cudaErrorNotSupported,
                        f"{call}: shareable handles of types {prop.requestedHandleTypes:#x}: {device.label} shares "
                        f"{_handle_types(device):#x} (POSIX file descriptors where 1)")
    return device


def _handle_types(device) -> int:
    """The shareable handle types `device` gives: its server's sessions share
    memory as they share pools' (client/runtime/ipc.py), so the same ones."""
    return device.properties.get("memoryPoolSupportedHandleTypes", 0) & POSIX_FD


def granularity(device, option: int = 0) -> int:
    """The server's cuMemGetAllocationGranularity (minimum, recommended) for `device`."""
    return device.properties.get("rcudaVmmGranularity", [2 << 20, 2 << 20])[option]


def _physical(handle: int, call: str) -> PhysicalAllocation:
    return handles.get(handle, PhysicalAllocation, call, CUresult.CUDA_ERROR_INVALID_VALUE)


# ------------------------------------------------------------------ address ranges


@driver()
def cuMemAddressReserve(ptr, size, alignment, addr, flags):
    require_initialized()
    out_pointer(ptr, "ptr")
    step = granularity(rt().device())
    alignment = alignment or step
    if flags or size <= 0 or size % step or alignment & (alignment - 1):
        raise _invalid("cuMemAddressReserve", f"size {size} (a multiple of {step}), alignment {alignment} "
                                              f"(a power of 2), flags {flags} (0)")
    ptr[0] = rt().virtual_memory.reserve(size, max(alignment, step), addr)
    return SUCCESS


@driver()
def cuMemAddressFree(ptr, size):
    require_initialized()
    rt().virtual_memory.free(ptr, size)
    return SUCCESS


# ------------------------------------------------------------------ physical memory


@driver()
def cuMemGetAllocationGranularity(granularity_out, prop, option):
    require_initialized()
    out_pointer(granularity_out, "granularity")
    device = _device_of_prop(prop, "cuMemGetAllocationGranularity")
    if option not in GRANULARITY_OPTIONS:
        raise _invalid("cuMemGetAllocationGranularity", f"option {option}")
    granularity_out[0] = granularity(device, option)
    return SUCCESS


@driver()
def cuMemCreate(handle, size, prop, flags):
    require_initialized()
    out_pointer(handle, "handle")
    device = _device_of_prop(prop, "cuMemCreate")
    step = granularity(device)
    if flags or size <= 0 or size % step:
        raise _invalid("cuMemCreate", f"size {size} must be a positive multiple of {device.label}'s granularity "
                                      f"{step}, flags 0 (not {flags})")
    physical = PhysicalAllocation(handles.new_handle(), device, size,
                                  bytes(interposer.ffi.buffer(prop, interposer.ffi.sizeof("CUmemAllocationProp"))))
    device.request("vmm_create", handle=physical.handle, size=size,
                   **({"shareable": 1} if prop.requestedHandleTypes & POSIX_FD else {}))
    handles.add(physical)
    handle[0] = physical.handle
    return SUCCESS


@driver()
def cuMemExportToShareableHandle(shareableHandle, handle, handleType, flags):
    """A new file descriptor for the program (an int at shareableHandle)
    naming the allocation's export on its server; another process of a
    session of the same server (and user, with --auth) imports it."""
    require_initialized()
    out_pointer(shareableHandle, "shareableHandle")
    physical = _physical(handle, "cuMemExportToShareableHandle")
    requested = interposer.ffi.cast("CUmemAllocationProp *", interposer.ffi.from_buffer(physical.prop))
    if flags or handleType != POSIX_FD or not requested.requestedHandleTypes & POSIX_FD:
        raise _invalid("cuMemExportToShareableHandle", f"handle type {handleType} (the allocation was made for "
                                                       f"{requested.requestedHandleTypes:#x}), flags {flags}")
    reply, _ = physical.device.request("vmm_export", handle=handle)
    fd = runtime_ipc.physical_handle(physical.device, bytes.fromhex(reply["worker"]), bytes.fromhex(reply["token"]),
                                     reply["size"])
    interposer.ffi.cast("int *", shareableHandle)[0] = fd
    return SUCCESS


@driver()
def cuMemImportFromShareableHandle(handle, osHandle, shHandleType):
    """osHandle: the descriptor (as a pointer-sized integer, as CUDA takes it)."""
    require_initialized()
    out_pointer(handle, "handle")
    if shHandleType != POSIX_FD:
        raise _invalid("cuMemImportFromShareableHandle", f"handle type {shHandleType}: POSIX file descriptors only")
    device, worker, token, size = runtime_ipc.read_physical_handle(address(osHandle), "cuMemImportFromShareableHandle")
    prop = interposer.ffi.new("CUmemAllocationProp *")
    prop.type = interposer.lib.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = POSIX_FD
    prop.location.type = interposer.lib.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device.ordinal
    physical = PhysicalAllocation(handles.new_handle(), device, size,
                                  bytes(interposer.ffi.buffer(prop, interposer.ffi.sizeof("CUmemAllocationProp"))))
    device.request("vmm_import", handle=physical.handle, worker=worker.hex(), token=token.hex())
    handles.add(physical)
    handle[0] = physical.handle
    return SUCCESS


@driver()
def cuMemRelease(handle):
    """The memory goes once nothing maps it any more (the server keeps count)."""
    require_initialized()
    physical = _physical(handle, "cuMemRelease")
    physical.device.request("vmm_release", handle=handle)
    physical.refs -= 1
    if physical.refs == 0:
        handles.remove(handle)
    return SUCCESS


@driver()
def cuMemRetainAllocationHandle(handle, addr):
    require_initialized()
    out_pointer(handle, "handle")
    mapping = rt().virtual_memory.at(address(addr))
    if mapping is None:
        raise _invalid("cuMemRetainAllocationHandle", f"{address(addr):#x} is not mapped")
    physical = mapping.physical
    physical.device.request("vmm_retain", handle=physical.handle)
    physical.refs += 1
    handles.add(physical)  # again, if the program had released it
    handle[0] = physical.handle
    return SUCCESS


@driver()
def cuMemGetAllocationPropertiesFromHandle(prop, handle):
    require_initialized()
    out_pointer(prop, "prop")
    physical = _physical(handle, "cuMemGetAllocationPropertiesFromHandle")
    interposer.ffi.memmove(prop, physical.prop, len(physical.prop))
    return SUCCESS


# ------------------------------------------------------------------ mappings


@driver()
def cuMemMap(ptr, size, offset, handle, flags):
    require_initialized()
    physical = _physical(handle, "cuMemMap")
    step = granularity(physical.device)
    if flags or size <= 0 or (ptr | size | offset) % step or offset + size > physical.size:
        raise _invalid("cuMemMap", f"{size} bytes at {ptr:#x} from offset {offset} of a {physical.size}-byte "
                                   f"allocation: each a multiple of {step}, inside it; flags 0")
    memory = rt().virtual_memory
    memory.check_unmapped(ptr, size)
    if physical.device.session.vmm_base != memory.window[0]:
        raise DriverError(CUresult.CUDA_ERROR_NOT_SUPPORTED,
                          f"cuMemMap on {physical.device.label}: its server's driver would not reserve the "
                          f"program's VMM window at {memory.window[0]:#x}")
    physical.device.request("vmm_map", ptr=ptr, size=size, offset=offset, handle=handle)
    mapping = Mapping(ptr, size, physical, {physical.device.ordinal: 0})
    memory.add(mapping)
    rt().allocations.add(ptr, size, physical.device)
    return SUCCESS


@driver()
def cuMemUnmap(ptr, size):
    """Whole mappings only, one or several in a row."""
    require_initialized()
    memory = rt().virtual_memory
    for mapping in memory.covering(ptr, size, "cuMemUnmap"):
        mapping.physical.device.request("vmm_unmap", ptr=mapping.ptr)
        memory.remove(mapping)
        rt().allocations.remove(mapping.ptr)
    return SUCCESS


@driver()
def cuMemSetAccess(ptr, size, desc, count):
    require_initialized()
    out_pointer(desc, "desc")
    mappings = rt().virtual_memory.covering(ptr, size, "cuMemSetAccess")
    for i in range(count):
        accessor = _device_of_location(desc[i].location, "cuMemSetAccess")
        flags = desc[i].flags
        if flags not in ACCESS_FLAGS:
            raise _invalid("cuMemSetAccess", f"access flags {flags}")
        for mapping in mappings:
            owner = mapping.physical.device
            if accessor is not owner:
                if accessor.session is not owner.session:
                    raise CudaError(cudaError.cudaErrorInvalidDevice,
                                    f"cuMemSetAccess: {accessor.label} cannot reach memory of {owner.label}: "
                                    f"another server")
                owner.request("mem_access", ptr=mapping.ptr, peer=accessor.local_index, flags=flags)
            mapping.access[accessor.ordinal] = flags
    return SUCCESS


@driver()
def cuMemGetAccess(flags, location, ptr):
    require_initialized()
    out_pointer(flags, "flags")
    out_pointer(location, "location")
    mapping = rt().virtual_memory.at(ptr)
    if mapping is None:
        raise _invalid("cuMemGetAccess", f"{ptr:#x} is not mapped")
    flags[0] = mapping.access.get(_device_of_location(location[0], "cuMemGetAccess").ordinal, 0)
    return SUCCESS

