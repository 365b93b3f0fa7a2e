"""The driver's virtual memory management, client side: address ranges the
program reserves, the physical allocations it creates, and their mappings.

A reserved range must never meet an allocation of any GPU: its addresses
come from the VMM window (docs/design.md "Pointers"), one for the whole
process as a CUDA reservation is valid on every device, reserved on each of
its servers when the devices opened (client/state.py).  A physical allocation lives on one GPU (its
server holds the bytes, named by the handle the client gave it); mapping
it at an address of a reservation makes [ptr, ptr + size) an allocation of
that GPU in the allocation map, so copies, memsets and kernels take the
runtime's paths.  Two halves of one range may be two GPUs' memory: each
half is its GPU's allocation.
"""
from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

from rcuda.errors import CudaError, cudaError

@dataclass(eq=False)
class PhysicalAllocation:
    """A cuMemCreate allocation (a CUmemGenericAllocationHandle)."""

    handle: int
    device: object      # the RemoteDevice holding its bytes
    size: int
    prop: bytes         # the CUmemAllocationProp it was created with
    refs: int = 1       # cuMemCreate and each cuMemRetainAllocationHandle, less cuMemRelease


@dataclass(eq=False)
class Mapping:
    ptr: int
    size: int
    physical: PhysicalAllocation
    access: dict = field(default_factory=dict)  # program ordinal -> CUmemAccess_flags

    @property
    def end(self) -> int:
        return self.ptr + self.size


def _invalid(message: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidValue, message)


class VirtualMemory:
    """The process's reservations and mappings."""

    def __init__(self):
        self._lock = threading.Lock()
        self._reserved: dict[int, int] = {}  # base -> size
        self._mappings: dict[int, Mapping] = {}  # ptr -> mapping
        self.window = (0, 0)  # (base, size): where reservations lie, set once the devices are open

    def reserve(self, size: int, alignment: int, hint: int) -> int:
        """A free range of `size` bytes aligned to `alignment`: at `hint` if
        that is free (CUDA takes it as a wish), else the lowest that fits."""
        with self._lock:
            taken = sorted(self._reserved.items())
            if hint and hint % alignment == 0 and self._free(taken, hint, size):
                base = hint
            else:
                base = self._lowest_fit(taken, size, alignment)
            self._reserved[base] = size
            return base

    def _free(self, taken: list, base: int, size: int) -> bool:
        low, length = self.window
        inside = low <= base and base + size <= low + length
        return inside and all(base + size <= start or start + span <= base for start, span in taken)

    def _lowest_fit(self, taken: list, size: int, alignment: int) -> int:
        low, length = self.window
        candidate = -(-low // alignment) * alignment
        for start, taken_length in taken:
            if candidate + size <= start:
                break
            candidate = max(candidate, -(-(start + taken_length) // alignment) * alignment)
        if candidate + size > low + length:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"cuMemAddressReserve of {size} bytes: the VMM window is full")
        return candidate

    def free(self, base: int, size: int) -> None:
        """cuMemAddressFree: exactly a reservation, with nothing mapped in it."""
        with self._lock:
            if self._reserved.get(base) != size:
                raise _invalid(f"cuMemAddressFree({base:#x}, {size}): not a reservation of that size")
            if any(base <= m.ptr < base + size for m in self._mappings.values()):
                raise _invalid(f"cuMemAddressFree({base:#x}, {size}): still mapped (cuMemUnmap first)")
            del self._reserved[base]

    def check_unmapped(self, ptr: int, size: int) -> None:
        """What cuMemMap needs of [ptr, ptr + size): inside one reservation, mapped nowhere."""
        with self._lock:
            if not any(b <= ptr and ptr + size <= b + s for b, s in self._reserved.items()):
                raise _invalid(f"cuMemMap({ptr:#x}, {size}): not inside one reserved range")
            if any(m.ptr < ptr + size and ptr < m.end for m in self._mappings.values()):
                raise _invalid(f"cuMemMap({ptr:#x}, {size}): already mapped")

    def add(self, mapping: Mapping) -> None:
        with self._lock:
            self._mappings[mapping.ptr] = mapping

    def remove(self, mapping: Mapping) -> None:
        with self._lock:
            self._mappings.pop(mapping.ptr, None)

    def covering(self, ptr: int, size: int, call: str) -> list[Mapping]:
        """The mappings that make up [ptr, ptr + size) exactly, in order."""
        with self._lock:
            found = sorted((m for m in self._mappings.values() if m.ptr < ptr + size and ptr < m.end),
                           key=lambda m: m.ptr)
        at = ptr
        for mapping in found:
            if mapping.ptr != at:
                break
            at = mapping.end
        if size <= 0 or not found or at != ptr + size:
            raise _invalid(f"{call}({ptr:#x}, {size}): the range is not a run of whole mappings")
        return found

    def at(self, address: int) -> Mapping | None:
        """The mapping holding `address`."""
        with self._lock:
            ptrs = sorted(self._mappings)
            i = bisect.bisect_right(ptrs, address) - 1
            mapping = self._mappings[ptrs[i]] if i >= 0 else None
        return mapping if mapping is not None and address < mapping.end else None

    def forget_device(self, device) -> None:
        """cudaDeviceReset: the device's physical memory and mappings are gone
        (its handles with them: the server no longer knows them)."""
        with self._lock:
            for mapping in [m for m in self._mappings.values() if m.physical.device is device]:
                del self._mappings[mapping.ptr]

    def clear(self) -> None:
        with self._lock:
            self._reserved.clear()
            self._mappings.clear()

