"""Device memory inside an address window, through the CUDA driver's virtual
memory management (cuMemAddressReserve/cuMemCreate/cuMemMap); and the
program's own virtual memory management calls (cuMemCreate, cuMemMap into
the session's VMM window), the same way.

Why: programs pass raw device pointers in kernel arguments and structs, so
the client cannot translate them; pointers from different servers must
therefore never be equal.  Each device's allocations lie in a window this
module reserves (at the client's address when the driver takes the hint,
elsewhere otherwise: the client settles with where it is, docs/design.md
"Pointers"), each allocation's physical memory mapped into it.  CuPy binds none of these calls, so
they go through ctypes to libcuda.so.1.  Struct layouts were checked
against cuda.h of CUDA 13 (CUmemAllocationProp: 32 bytes, location at 8;
CUmemAccessDesc: 12 bytes, flags at 8).
"""
from __future__ import annotations

import ctypes
import functools
import logging
from dataclasses import dataclass

from rcuda.errors import CudaError, cudaError

log = logging.getLogger(__name__)

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0
CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1
CUDA_ERROR_OUT_OF_MEMORY = 2


class CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class CUmemAllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class CUmemAllocationProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", CUmemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", CUmemAllocFlags)]


class CUmemAccessDesc(ctypes.Structure):
    _fields_ = [("location", CUmemLocation), ("flags", ctypes.c_int)]


assert ctypes.sizeof(CUmemAllocationProp) == 32 and ctypes.sizeof(CUmemAccessDesc) == 12


def check(cu, device: int, name: str, *args) -> None:
    """Call driver function `name`; a failure becomes a CudaError naming it."""
    status = getattr(cu, name)(*args)
    if status:
        code = cudaError.cudaErrorMemoryAllocation if status == CUDA_ERROR_OUT_OF_MEMORY else status
        raise CudaError(code, f"{name} on GPU {device} failed with CUresult {status}")


def device_memory(device: int) -> CUmemAllocationProp:
    """The allocation properties of pinned memory on GPU `device`."""
    return CUmemAllocationProp(type=CU_MEM_ALLOCATION_TYPE_PINNED,
                               location=CUmemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device))


def granularity(cu, device: int, option: int) -> int:
    found = ctypes.c_size_t()
    check(cu, device, "cuMemGetAllocationGranularity", ctypes.byref(found), ctypes.byref(device_memory(device)), option)
    return max(found.value, 1)


def set_access(cu, device: int, address: int, size: int, accessor: int, flags: int) -> None:
    """Kernels on GPU `accessor` may use [address, address + size) (CUmemAccess_flags)."""
    access = CUmemAccessDesc(CUmemLocation(CU_MEM_LOCATION_TYPE_DEVICE, accessor), flags)
    check(cu, device, "cuMemSetAccess", address, size, ctypes.byref(access), 1)


@functools.cache
def driver():
    lib = ctypes.CDLL("libcuda.so.1")
    u64, size_t = ctypes.c_uint64, ctypes.c_size_t
    signatures = {
        "cuMemAddressReserve": [ctypes.POINTER(u64), size_t, size_t, u64, ctypes.c_ulonglong],
        "cuMemAddressFree": [u64, size_t],
        "cuMemCreate": [ctypes.POINTER(u64), size_t, ctypes.POINTER(CUmemAllocationProp), ctypes.c_ulonglong],
        "cuMemRelease": [u64],
        "cuMemMap": [u64, size_t, size_t, u64, ctypes.c_ulonglong],
        "cuMemUnmap": [u64, size_t],
        "cuMemSetAccess": [u64, size_t, ctypes.POINTER(CUmemAccessDesc), size_t],
        "cuMemGetAllocationGranularity": [ctypes.POINTER(size_t), ctypes.POINTER(CUmemAllocationProp), ctypes.c_int],
        "cuMemsetD16Async": [u64, ctypes.c_ushort, size_t, ctypes.c_void_p],
        "cuMemsetD32Async": [u64, ctypes.c_uint, size_t, ctypes.c_void_p],
    }
    for name, argtypes in signatures.items():
        getattr(lib, name).argtypes = argtypes
        getattr(lib, name).restype = ctypes.c_int
    return lib


@dataclass
class Mapping:
    address: int
    size: int      # mapped bytes (a multiple of the granularity)
    handle: int    # the physical allocation


class Reservation:
    """cuMemAddressReserve: `size` bytes of addresses, valid on every GPU of
    the process.  `hint` is only a wish: a driver may place the range
    elsewhere (an H100's would not take 0x6000_0000_0000), so `base` is
    where it really is, and the client settles with that."""

    def __init__(self, device: int, size: int, hint: int | None):
        cu = driver()
        self._cu = cu
        alignment = granularity(cu, device, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        reserved = ctypes.c_uint64()
        status = cu.cuMemAddressReserve(ctypes.byref(reserved), size, alignment, hint or 0, 0)
        if status and hint:  # some drivers refuse a hint they cannot take instead of ignoring it
            status = cu.cuMemAddressReserve(ctypes.byref(reserved), size, alignment, 0, 0)
        if status:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"cuMemAddressReserve of {size} bytes on GPU {device} failed with CUresult {status}")
        self.base, self.size = reserved.value, size

    def release(self) -> None:
        self._cu.cuMemAddressFree(self.base, self.size)


class AddressWindow:
    """A device's allocations inside a Reservation, placed bottom-up."""

    def __init__(self, device: int, reservation: Reservation):
        self._cu = driver()
        self.device = device
        self._prop = device_memory(device)
        self.granularity = granularity(self._cu, device, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        self.base, self.size = reservation.base, reservation.size
        self._next = self.base
        self._mappings: dict[int, Mapping] = {}
        self._free: list[tuple[int, int]] = []  # (address, size) of unmapped ranges below _next

    def _check(self, name: str, *args) -> None:
        check(self._cu, self.device, name, *args)

    def allocate(self, size: int) -> int:
        span = -(-size // self.granularity) * self.granularity
        address = self._place(span)
        handle = ctypes.c_uint64()
        self._check("cuMemCreate", ctypes.byref(handle), span, ctypes.byref(self._prop), 0)
        try:
            self._check("cuMemMap", address, span, 0, handle.value, 0)
            set_access(self._cu, self.device, address, span, self.device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        except CudaError:
            self._cu.cuMemUnmap(address, span)
            self._cu.cuMemRelease(handle.value)
            self._free.append((address, span))
            raise
        self._mappings[address] = Mapping(address, span, handle.value)
        return address

    def set_access(self, address: int, device: int, flags: int) -> None:
        """Kernels on GPU `device` may use the allocation at `address`
        (CUmemAccess_flags, the runtime's cudaMemAccessFlags values; 0 takes
        it away)."""
        mapping = self._mappings.get(address)
        if mapping is None:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"GPU {self.device}: {address:#x} is not an allocation's "
                                                             f"start")
        set_access(self._cu, self.device, mapping.address, mapping.size, device, flags)

    def _place(self, span: int) -> int:
        for i, (address, size) in enumerate(self._free):  # first fit among freed ranges
            if size >= span:
                if size == span:
                    del self._free[i]
                else:
                    self._free[i] = (address + span, size - span)
                return address
        if self._next + span > self.base + self.size:
            raise CudaError(cudaError.cudaErrorMemoryAllocation, f"GPU {self.device}: the address window is full")
        address, self._next = self._next, self._next + span
        return address

    def free(self, address: int) -> None:
        mapping = self._mappings.pop(address)
        self._cu.cuMemUnmap(mapping.address, mapping.size)
        self._cu.cuMemRelease(mapping.handle)
        self._free.append((mapping.address, mapping.size))

    def free_all(self) -> None:
        """The session's end on this GPU (or cudaDeviceReset): every allocation
        goes; the reservation stays its session's."""
        for address in list(self._mappings):
            self.free(address)


class ProgramMappings:
    """The program's own cuMemCreate/cuMemMap on one GPU (client/driver/vmm.py),
    inside the session's VMM window: a Reservation the session made when
    it opened, whose addresses the client hands out (cuMemAddressReserve)."""

    def __init__(self, device: int):
        self._cu = driver()
        self.device = device

    def granularity(self) -> tuple[int, int]:
        return (granularity(self._cu, self.device, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                granularity(self._cu, self.device, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))

    def create(self, size: int) -> int:
        handle = ctypes.c_uint64()
        prop = device_memory(self.device)
        check(self._cu, self.device, "cuMemCreate", ctypes.byref(handle), size, ctypes.byref(prop), 0)
        return handle.value

    def release(self, handle: int) -> None:
        check(self._cu, self.device, "cuMemRelease", handle)

    def map(self, address: int, size: int, offset: int, handle: int) -> None:
        check(self._cu, self.device, "cuMemMap", address, size, offset, handle, 0)
        try:
            set_access(self._cu, self.device, address, size, self.device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        except CudaError:
            self.unmap(address, size)
            raise

    def set_access(self, address: int, size: int, accessor: int, flags: int) -> None:
        set_access(self._cu, self.device, address, size, accessor, flags)

    def unmap(self, address: int, size: int) -> None:
        check(self._cu, self.device, "cuMemUnmap", address, size)


def memset_pattern(stream: int, ptr: int, value: int, size: int, elem: int, device: int) -> None:
    """cuMemsetD16Async/cuMemsetD32Async: `size` bytes of `elem`-byte values."""
    name = "cuMemsetD16Async" if elem == 2 else "cuMemsetD32Async"
    check(driver(), device, name, ptr, value & ((1 << 8 * elem) - 1), size // elem, stream or None)
