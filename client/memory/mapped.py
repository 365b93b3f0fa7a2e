"""Mapped (zero-copy) host memory: cudaHostAlloc(cudaHostAllocMapped),
cudaHostRegister(cudaHostRegisterMapped), cudaHostGetDevicePointer.

A kernel on a remote GPU cannot load from this host's memory, so each
mapped range is a *mirror*: the host bytes H the program reads and writes,
and a device allocation D on one device (the current device at the call;
with cudaHostAllocPortable too) that its kernels read and write.

  * cudaHostAlloc(Mapped) puts H at D's address: D is allocated first (in
    the device's address window, which this process claimed), then H is
    mapped there.  The host pointer is the device
    pointer, as with unified addressing on a local GPU, and programs may
    pass it straight to kernels.  H's pages are a memory file's, mapped a
    second time elsewhere (the alias), where rcuda writes what the device
    wrote without ever making the program's view of them writable.
  * cudaHostRegister(Mapped) leaves the program's memory where it is
    (H != D); cudaHostGetDevicePointer returns D
    (cudaDevAttrCanUseHostPointerForRegisteredMem reads 0).

The two are kept in step by native/mapped_memory.c: the host's writes are
found by page protection and sent before anything else goes to the device
(so a kernel sees what the host wrote before its launch); after a
synchronisation (cudaDeviceSynchronize, cudaStreamSynchronize,
cudaEventSynchronize, a synchronous copy, before a host function runs) the
device's writes are downloaded into H if the device may have written
(client/device.py, `RemoteDevice.request`).  What differs from a local GPU:
neither side sees the other's writes while a kernel runs.

Copies and memsets that touch a mirror are made on its device side (D), in
their stream; one into a mirror that returns synchronously is followed by a
refresh (client/runtime/memory.py).
"""
from __future__ import annotations

import ctypes
import logging
import mmap
import os
import threading
from dataclasses import dataclass

from rcuda._generated.cuda_enums import MACROS
from rcuda.errors import CudaError, RcudaError, cudaError

from . import address_space

log = logging.getLogger(__name__)

PAGE = mmap.PAGESIZE
HOST_ALLOC_PORTABLE = MACROS["cudaHostAllocPortable"]
HOST_REGISTER_READ_ONLY = MACROS["cudaHostRegisterReadOnly"]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


def _round_up(value: int, alignment: int = PAGE) -> int:
    return -(-value // alignment) * alignment


def _map(address: int, length: int, flags: int, memory: int) -> int | None:
    """mmap of the memory file `memory`, readable and writable; None if it failed."""
    placed = _libc.mmap(address or None, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, memory, 0)
    return None if placed in (None, MAP_FAILED) else placed


@dataclass(frozen=True)
class Mirror:
    slot: int          # native/mapped_memory.c's
    host: int          # the host copy [host, host + size)
    size: int
    device_ptr: int    # the device address of host's first byte
    device: object     # the RemoteDevice holding the device copy
    allocation: int    # the device allocation holding it (freed with the mirror)
    flags: int         # as the program gave them
    allocated: bool    # cudaHostAlloc's (its host copy is ours to unmap), or registered program memory
    alias: int = 0     # cudaHostAlloc's: the host copy's pages mapped a second time (ours to unmap)
    managed: bool = False  # cudaMallocManaged's (client/memory/managed.py): freed by cudaFree

    def on_host(self, address: int, length: int = 1) -> bool:
        return self.host <= address and address + max(length, 1) <= self.host + self.size

    def on_device(self, address: int, length: int = 1) -> bool:
        return self.device_ptr <= address and address + max(length, 1) <= self.device_ptr + self.size

    def touches(self, address: int, length: int) -> bool:
        end = address + max(length, 1)
        return (address < self.host + self.size and self.host < end) or \
            (address < self.device_ptr + self.size and self.device_ptr < end)

    def to_device(self, address: int) -> int:
        return self.device_ptr + (address - self.host)

    def to_host(self, address: int) -> int:
        return self.host + (address - self.device_ptr)


class MappedMemory:
    """The process's mirrors (C holds their pages and dirty bits)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._mirrors: list[Mirror] = []

    @property
    def active(self) -> bool:
        return bool(self._mirrors)

    # ---------------------------------------------------------- lookups

    def find(self, address: int, length: int = 1) -> Mirror | None:
        """The mirror whose host copy or device copy holds [address, address + length)."""
        for mirror in self._mirrors:
            if mirror.on_host(address, length) or mirror.on_device(address, length):
                return mirror
        return None

    def on_host(self, address: int, length: int = 1) -> Mirror | None:
        for mirror in self._mirrors:
            if mirror.on_host(address, length):
                return mirror
        return None

    def at(self, base: int) -> Mirror | None:
        """The mirror whose host copy starts at `base`."""
        for mirror in self._mirrors:
            if mirror.host == base:
                return mirror
        return None

    def touching(self, address: int, length: int) -> Mirror | None:
        for mirror in self._mirrors:
            if mirror.touches(address, length):
                return mirror
        return None

    def of_device(self, device) -> list[Mirror]:
        return [m for m in self._mirrors if m.device is device]

    # ---------------------------------------------------------- making and freeing

    def allocate(self, runtime, device, size: int, flags: int, managed: bool = False) -> int:
        """cudaHostAlloc(cudaHostAllocMapped), or cudaMallocManaged if
        `managed`: the host copy at the device copy's address.  Returns that
        address."""
        fast, allocations = runtime.fast, runtime.allocations
        call = "cudaMallocManaged" if managed else "cudaHostAlloc(cudaHostAllocMapped)"
        rounded = _round_up(size)
        try:
            memory = os.memfd_create("rcuda mapped memory", os.MFD_CLOEXEC)
        except OSError as exc:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"{call} of {size} bytes: {exc}") from None
        try:
            os.ftruncate(memory, rounded)
            alias = _map(0, rounded, mmap.MAP_SHARED, memory)
            if alias is None:
                raise CudaError(cudaError.cudaErrorMemoryAllocation,
                                f"{call} of {size} bytes: out of host memory "
                                f"(errno {ctypes.get_errno()})")
            try:
                base, host = self._place(device, call, size, rounded, memory)
            except BaseException:
                _libc.munmap(alias, rounded)
                raise
        except OSError as exc:
            raise CudaError(cudaError.cudaErrorMemoryAllocation, f"{call} of {size} bytes: {exc}") from None
        finally:
            os.close(memory)  # the two mappings keep it
        allocations.add(base, rounded + PAGE, device)
        try:
            # Both copies start as zeros; answered, so no flush can come before it.
            device.request("mirror_zero", ptr=host, size=rounded)
            slot = fast.mirror_add(host, size, host, device, alias=alias, dirty=False, device_only_reads=False,
                                   guarded=managed and flags != MACROS["cudaMemAttachHost"])
            if slot < 0:
                raise CudaError(cudaError.cudaErrorMemoryAllocation,
                                f"{call}: too many mapped and managed ranges at once")
        except BaseException:
            allocations.remove(base)
            self._free_device_copy(device, base)
            address_space.unmap(host, rounded)
            _libc.munmap(alias, rounded)
            raise
        self.add(Mirror(slot, host, size, host, device, base, flags, allocated=True, alias=alias, managed=managed))
        return host

    @staticmethod
    def _place(device, call: str, size: int, rounded: int, memory: int) -> tuple[int, int]:
        """A device allocation with a page-aligned address inside it where
        `rounded` bytes of host memory are now mapped: (its base, that
        address).  The device's window is claimed by this process
        (client/memory/address_space.py), so the place is free."""
        # A page more than asked: the device's allocations are aligned
        # to 256 bytes, the host copy must start on a page.
        base = device.malloc(rounded + PAGE)
        host = _round_up(base)
        if not address_space.place(host, rounded, memory):
            errno = ctypes.get_errno()
            MappedMemory._free_device_copy(device, base)
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"{call} of {size} bytes: its host copy cannot be placed at its device address "
                            f"{host:#x} on {device.label} (errno {errno})")
        return base, host

    def register(self, runtime, device, address: int, size: int, flags: int) -> Mirror:
        """cudaHostRegister(cudaHostRegisterMapped): a device copy of the
        program's memory, sent at the next message to the device."""
        fast, allocations = runtime.fast, runtime.allocations
        device_ptr = device.malloc(size)
        allocations.add(device_ptr, size, device)
        try:
            slot = fast.mirror_add(address, size, device_ptr, device, alias=0, dirty=True,
                                   device_only_reads=bool(flags & HOST_REGISTER_READ_ONLY))
            if slot < 0:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"cudaHostRegister({address:#x}, {size}, cudaHostRegisterMapped): not memory of "
                                f"this process (or too many mapped ranges at once)")
        except BaseException:
            allocations.remove(device_ptr)
            self._free_device_copy(device, device_ptr)
            raise
        mirror = Mirror(slot, address, size, device_ptr, device, device_ptr, flags, allocated=False)
        self.add(mirror)
        return mirror

    def mirror_variable(self, runtime, device, host: int, size: int, device_ptr: int) -> Mirror:
        """A __managed__ variable (client/memory/managed.py): the module's
        variable at `device_ptr` and host memory at `host` that holds its
        bytes already.  It lasts as long as the session."""
        slot = runtime.fast.mirror_add(host, size, device_ptr, device, alias=0, dirty=False, device_only_reads=False)
        if slot < 0:
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            "__managed__ variables: too many mapped and managed ranges at once")
        mirror = Mirror(slot, host, size, device_ptr, device, allocation=0, flags=MACROS["cudaMemAttachGlobal"],
                        allocated=False, managed=True)
        self.add(mirror)
        return mirror

    def release(self, runtime, mirror: Mirror) -> None:
        """cudaFreeHost, cudaHostUnregister: the mirror ends (its host pages
        are plain memory again, unmapped by the caller if they were ours);
        its device copy is freed."""
        # Not while another thread downloads the device's mirrors through
        # Python (a ZeroMQ link): it would ask for a device copy freed meanwhile.
        with mirror.device.mirror_lock:
            self.forget(runtime.fast, mirror)
        runtime.allocations.remove(mirror.allocation)
        self._free_device_copy(mirror.device, mirror.allocation)

    def forget_device(self, fast, device) -> None:
        """cudaDeviceReset: the device copies are gone; the host copies stay,
        as plain memory (cudaHostGetDevicePointer now refuses them)."""
        for mirror in self.of_device(device):
            self.forget(fast, mirror)

    def forget_all(self, fast) -> None:
        """At the end of the session: every host copy is plain memory again."""
        with self._lock:
            mirrors, self._mirrors = self._mirrors, []
            for mirror in mirrors:
                mirror.device.mirrored -= 1
        if mirrors:
            fast.mirrors_forget()
        for mirror in mirrors:
            if mirror.alias:
                _libc.munmap(mirror.alias, _round_up(mirror.size))

    def forget_after_fork(self) -> None:
        """In a forked child (C already made the pages plain memory)."""
        with self._lock:
            self._mirrors = []

    def add(self, mirror: Mirror) -> None:
        with self._lock:
            self._mirrors = [*self._mirrors, mirror]  # lookups read the list without the lock
            mirror.device.mirrored += 1

    def forget(self, fast, mirror: Mirror, keep_alias: bool = False) -> None:
        """The mirror ends; C is done with it.  Its alias goes too, unless
        its owner still needs it (client/memory/pinned.py)."""
        with self._lock:
            if mirror not in self._mirrors:
                return
            self._mirrors = [m for m in self._mirrors if m is not mirror]
            mirror.device.mirrored -= 1
        fast.mirror_remove(mirror.slot)
        if mirror.alias and not keep_alias:  # the host copy stays, as plain memory
            _libc.munmap(mirror.alias, _round_up(mirror.size))

    @staticmethod
    def _free_device_copy(device, ptr: int) -> None:
        try:
            device.free(ptr)
        except RcudaError as exc:  # a lost server or a sticky error: the session frees it in the end
            log.debug("freeing the device copy of mapped memory at %#x: %s", ptr, exc)
