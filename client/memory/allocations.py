"""Which device owns a device address.

Pointers are the servers' own, passed through unchanged (kernel arguments
and structs carry raw pointers, so the client could not translate them).
Every device allocates in its own address window, so one map answers "whose
is this address?" for cudaMemcpyDefault, cudaPointerGetAttributes and
cross-device copies, and lets the client reject bad pointers before they
travel.  Inside the interposer C keeps a copy (native/allocation_table.c),
told of every change, so that cudaMemcpy can be made in C.
"""
from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

from rcuda.errors import CudaError, cudaError


@dataclass(frozen=True)
class Allocation:
    base: int
    size: int
    device: object  # the RemoteDevice that owns it

    @property
    def end(self) -> int:
        return self.base + self.size

    def contains(self, address: int, length: int = 1) -> bool:
        return self.base <= address and address + max(length, 1) <= self.end


class AllocationMap:
    def __init__(self):
        self._lock = threading.Lock()
        self._bases: list[int] = []  # sorted
        self._by_base: dict[int, Allocation] = {}
        self._watcher = None  # told of every change, in order (under _lock)

    def watch(self, watcher) -> None:
        """From now on tell `watcher` of every change: allocation_added(a),
        allocation_removed(base), allocations_cleared(); the allocations
        already here first."""
        with self._lock:
            self._watcher = watcher
            for allocation in self._by_base.values():
                watcher.allocation_added(allocation)

    def add(self, base: int, size: int, device) -> Allocation:
        allocation = Allocation(base, max(size, 1), device)
        with self._lock:
            i = bisect.bisect_left(self._bases, base)
            neighbours = [self._by_base[b] for b in self._bases[max(i - 1, 0):i + 1]]
            for other in neighbours:
                if other.base < allocation.end and base < other.end:
                    raise CudaError(cudaError.cudaErrorMemoryAllocation,
                                    f"{device} returned address {base:#x} overlapping an allocation of "
                                    f"{other.device}: servers must allocate inside their address windows")
            self._bases.insert(i, base)
            self._by_base[base] = allocation
            if self._watcher is not None:
                self._watcher.allocation_added(allocation)
        return allocation

    def remove(self, base: int) -> Allocation | None:
        with self._lock:
            allocation = self._by_base.pop(base, None)
            if allocation is not None:
                del self._bases[bisect.bisect_left(self._bases, base)]
                if self._watcher is not None:
                    self._watcher.allocation_removed(base)
            return allocation

    def find(self, address: int, length: int = 1) -> Allocation | None:
        """The allocation holding [address, address+length), if any."""
        with self._lock:
            i = bisect.bisect_right(self._bases, address) - 1
            if i < 0:
                return None
            allocation = self._by_base[self._bases[i]]
        return allocation if allocation.contains(address, length) else None

    def of_device(self, device) -> list[Allocation]:
        with self._lock:
            return [a for a in self._by_base.values() if a.device is device]

    def clear(self) -> None:
        with self._lock:
            self._bases.clear()
            self._by_base.clear()
            if self._watcher is not None:
                self._watcher.allocations_cleared()
