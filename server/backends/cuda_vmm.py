"""Device memory inside an address window the client chose, through the CUDA
driver's virtual memory management (cuMemAddressReserve/cuMemCreate/cuMemMap).

Why: programs pass raw device pointers in kernel arguments and structs, so
the client cannot translate them; pointers from different servers must
therefore never be equal.  The client gives each device a window of
addresses; this module reserves that window on the GPU (as a hint: the
driver may refuse the exact place, and then we say so) and maps each
allocation's physical memory into it.  CuPy binds none of these calls, so
they go through ctypes to libcuda.so.1.  Struct layouts were checked
against cuda.h of CUDA 13 (CUmemAllocationProp: 32 bytes, location at 8;
CUmemAccessDesc: 12 bytes, flags at 8).
"""
from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass

from rcuda.errors import CudaError, cudaError

log = logging.getLogger(__name__)

CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
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


def _driver():
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


class AddressWindow:
    """[base, base + size) reserved on one GPU, allocated into bottom-up."""

    def __init__(self, device: int, base: int, size: int):
        self._cu = _driver()
        self.device = device
        self._prop = CUmemAllocationProp(type=CU_MEM_ALLOCATION_TYPE_PINNED,
                                         location=CUmemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device))
        granularity = ctypes.c_size_t()
        self._check("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(self._prop),
                    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        self.granularity = max(granularity.value, 1)
        reserved = ctypes.c_uint64()
        self._check("cuMemAddressReserve", ctypes.byref(reserved), size, self.granularity, base, 0)
        if reserved.value != base:
            self._cu.cuMemAddressFree(reserved.value, size)
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"GPU {device}: the driver would not reserve the address window at {base:#x} "
                            f"(offered {reserved.value:#x}); device pointers could collide with another server's")
        self.base, self.size = base, size
        self._next = base
        self._mappings: dict[int, Mapping] = {}
        self._free: list[tuple[int, int]] = []  # (address, size) of unmapped ranges below _next

    def _check(self, name: str, *args) -> None:
        status = getattr(self._cu, name)(*args)
        if status:
            code = cudaError.cudaErrorMemoryAllocation if status == CUDA_ERROR_OUT_OF_MEMORY else status
            raise CudaError(code, f"{name} on GPU {self.device} failed with CUresult {status}")

    def allocate(self, size: int) -> int:
        span = -(-size // self.granularity) * self.granularity
        address = self._place(span)
        handle = ctypes.c_uint64()
        self._check("cuMemCreate", ctypes.byref(handle), span, ctypes.byref(self._prop), 0)
        try:
            self._check("cuMemMap", address, span, 0, handle.value, 0)
            access = CUmemAccessDesc(CUmemLocation(CU_MEM_LOCATION_TYPE_DEVICE, self.device),
                                     CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            self._check("cuMemSetAccess", address, span, ctypes.byref(access), 1)
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
        access = CUmemAccessDesc(CUmemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device), flags)
        self._check("cuMemSetAccess", mapping.address, mapping.size, ctypes.byref(access), 1)

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

    def close(self) -> None:
        for address in list(self._mappings):
            self.free(address)
        self._cu.cuMemAddressFree(self.base, self.size)
