"""Pinned host memory: cudaHostAlloc, cudaMallocHost, cudaHostRegister.

On a local GPU, pinned memory is page-locked so that the GPU can DMA from it
and async copies can overlap.  Here the GPU is across a network and the
client reads host memory itself, so any memory is valid for async
copies: pinned memory is plain memory of this process (anonymous mmap, so
large allocations cost nothing until touched, and freeing returns it).  We
still track it, so that cudaPointerGetAttributes, cudaHostGetFlags and
cudaMemcpyDefault know these ranges are host memory.  cudaHostAlloc's
memory is placed where kernels can reach it too (client/memory/pinned.py).

Mapped (zero-copy) memory is tracked here too; its device copy and the
bookkeeping that keeps the two in step are client/memory/mapped.py's.
"""
from __future__ import annotations

import bisect
import itertools
import threading
from dataclasses import dataclass

from rcuda.errors import CudaError, cudaError

from ..transport.link import Gate
from . import address_space



@dataclass(frozen=True)
class HostRange:
    base: int
    size: int
    flags: int
    allocated: bool  # by cudaHostAlloc (ours to free), or registered by the program

    def contains(self, address: int, length: int = 1) -> bool:
        return self.base <= address and address + max(length, 1) <= self.base + self.size


class HostMemory:
    def __init__(self):
        self._lock = threading.Lock()
        self._bases: list[int] = []
        self._ranges: dict[int, HostRange] = {}
        self._watcher = None  # told of every change, in order (under _lock)

    def watch(self, watcher) -> None:
        """From now on tell `watcher` of every change: pinned_added(range),
        pinned_removed(base); the ranges already here first.  (C records
        asynchronous uploads from pageable memory only: native/async_fast_path.c.)"""
        with self._lock:
            self._watcher = watcher
            for found in self._ranges.values():
                watcher.pinned_added(found)

    def add_range(self, address: int, size: int, flags: int) -> None:
        """cudaHostAlloc's memory (client/memory/pinned.py, mapped.py): unmapped here."""
        self._add(HostRange(address, size, flags, allocated=True))

    def free(self, address: int) -> None:
        if address == 0:
            return
        found = self._remove(address, allocated=True, what="cudaFreeHost")
        address_space.unmap(found.base, found.size)  # (mapped memory lies in a device's window)

    def check_registrable(self, address: int, size: int) -> None:
        """cudaHostRegister's checks: a range, not pinned in any part yet."""
        if address == 0 or size == 0:
            raise CudaError(cudaError.cudaErrorInvalidValue, "cudaHostRegister of a NULL or empty range")
        with self._lock:
            # Ranges never overlap: only one starting before `address` can reach into it.
            first = max(bisect.bisect_left(self._bases, address) - 1, 0)
            candidates = [self._ranges[b] for b in self._bases[first:bisect.bisect_left(self._bases, address + size)]]
        found = next((r for r in candidates if r.base < address + size and address < r.base + r.size), None)
        if found is not None:
            raise CudaError(cudaError.cudaErrorHostMemoryAlreadyRegistered,
                            f"cudaHostRegister({address:#x}, {size}): overlaps pinned memory at {found.base:#x} "
                            f"(+{found.size})")

    def register(self, address: int, size: int, flags: int) -> None:
        self.check_registrable(address, size)
        self._add(HostRange(address, size, flags, allocated=False))

    def unregister(self, address: int) -> None:
        try:
            self._remove(address, allocated=False, what="cudaHostUnregister")
        except CudaError:
            raise CudaError(cudaError.cudaErrorHostMemoryNotRegistered,
                            f"cudaHostUnregister({address:#x}): not registered") from None

    def find(self, address: int, length: int = 1) -> HostRange | None:
        with self._lock:
            i = bisect.bisect_right(self._bases, address) - 1
            found = self._ranges[self._bases[i]] if i >= 0 else None
        return found if found is not None and found.contains(address, length) else None

    def _add(self, found: HostRange) -> None:
        with self._lock:
            bisect.insort(self._bases, found.base)
            self._ranges[found.base] = found
            if self._watcher is not None:
                self._watcher.pinned_added(found)

    def _remove(self, address: int, allocated: bool, what: str) -> HostRange:
        with self._lock:
            found = self._ranges.get(address)
            if found is None or found.allocated != allocated:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"{what}({address:#x}): not memory from "
                                f"{'cudaHostAlloc/cudaMallocHost' if allocated else 'cudaHostRegister'}")
            del self._ranges[address]
            del self._bases[bisect.bisect_left(self._bases, address)]
            if self._watcher is not None:
                self._watcher.pinned_removed(address)
            return found


class PendingDownloads:
    """Asynchronous downloads into pinned memory whose bytes have not landed.

    Such a copy writes the program's buffer when its reply arrives, and an
    upload from pinned memory reads the buffer as its message goes out; in
    one stream CUDA runs the two in order, so an upload that overlaps a
    download still in flight must wait for its bytes.  It waits behind a
    `Gate` on its device's link (client/transport/link.py): later messages to that
    device wait too, never wrongly, and the program is not held up."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending: dict[int, tuple[int, int, list]] = {}  # token -> (base, size, callbacks when landed)
        self._tokens = itertools.count(1)

    def started(self, base: int, size: int) -> int:
        """A download into [base, base + size) is on its way: its token."""
        with self._lock:
            token = next(self._tokens)
            self._pending[token] = (base, size, [])
        return token

    def landed(self, token: int) -> None:
        """Its bytes are written (or it failed: nothing more will come)."""
        with self._lock:
            _, _, waiting = self._pending.pop(token, (0, 0, []))
        for callback in waiting:
            callback()

    def gate_for(self, base: int, size: int) -> Gate | None:
        """A gate that opens when every download overlapping [base, base +
        size) has landed, or None when none is in flight."""
        with self._lock:
            overlapping = [waiting for b, s, waiting in self._pending.values() if b < base + size and base < b + s]
            if not overlapping:
                return None
            gate, left = Gate(), [len(overlapping)]

            def one_landed():
                with self._lock:
                    left[0] -= 1
                    done = left[0] == 0
                if done:
                    gate.open()

            for waiting in overlapping:
                waiting.append(one_landed)
        return gate
