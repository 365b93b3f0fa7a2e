"""Page-locked host memory that kernels can reach: cudaHostAlloc (any flags
but cudaHostAllocMapped, whose memory is mapped.py's from the start),
cudaMallocHost, cuMemAllocHost, cuMemHostAlloc.

Under unified addressing a local GPU reaches page-locked memory at its host
address, and programs rely on it (NVIDIA's p2pBandwidthLatencyTest passes a
cudaHostAlloc'd flag to a kernel that polls it).  A remote GPU cannot reach
this host, so each allocation is a *block* placed where a device copy can be
made at the same address on any GPU: in the program's VMM window
(docs/design.md "Pointers"), which every server reserved.

Until a kernel is given an address inside it, a block is plain memory of the
process and costs nothing more.  The first launch on a device whose
parameters hold such an address *attaches* the block there: physical memory
mapped at the same address on that GPU (vmm_create + vmm_map), kept in step
with the host copy as a mirror (mapped.py).  A launch on another device moves
it there, after the first device's work is done.  C sends such launches to
Python (native/allocation_table.c, pinned blocks).  Only the launch's
parameters are looked at: an address a kernel reads from device memory does
not attach a block.
"""
from __future__ import annotations

import bisect
import ctypes
import mmap
import os
import threading
from dataclasses import dataclass

from rcuda.errors import CudaError, RcudaError, cudaError

from . import address_space
from .mapped import MappedMemory, Mirror, _libc, _map, _round_up

#: The smallest block: a GPU's VMM granularity (the servers report theirs).
GRANULE = 2 << 20


@dataclass(eq=False)
class Block:
    host: int            # the host copy, [host, host + size); its device copy is at the same address
    size: int
    span: int            # addresses it takes in the VMM window (whole granules)
    flags: int           # as the program gave them
    mirror: Mirror | None = None  # while attached to a device
    handle: int = 0      # the physical allocation of that device (vmm_create)


class PinnedMemory:
    def __init__(self, mapped: MappedMemory):
        self._mapped = mapped
        self._lock = threading.Lock()
        self._blocks: dict[int, Block] = {}
        self._bases: list[int] = []  # the blocks' hosts, sorted
        self._attaching = threading.Lock()

    def allocate(self, runtime, size: int, flags: int) -> int:
        """A block of `size` bytes (zeros), attached nowhere yet."""
        granule = max([GRANULE, *(max(d.properties.get("rcudaVmmGranularity") or [0]) for d in runtime.devices)])
        span = -(-size // granule) * granule
        host = runtime.virtual_memory.reserve(span, granule, 0)  # rcuda's own range of the window
        length = _round_up(size)
        if not address_space.place_private(host, length):
            runtime.virtual_memory.free(host, span)
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"cudaHostAlloc of {size} bytes: no host memory at {host:#x} "
                            f"(errno {ctypes.get_errno()})")
        block = Block(host, size, span, flags)
        with self._lock:
            self._blocks[host] = block
            bisect.insort(self._bases, host)
        runtime.fast.pinned_block(host, span, None)
        return host

    def free(self, runtime, host: int) -> bool:
        """cudaFreeHost of a block (after every device's queued work): False
        if `host` starts none."""
        with self._lock:
            block = self._blocks.pop(host, None)
            if block is not None:
                self._bases.remove(host)
        if block is None:
            return False
        runtime.fast.pinned_block(host, block.span, None, add=False)
        with self._attaching:
            if block.mirror is not None:
                self._detach(runtime, block, keep_bytes=False)
        address_space.unmap(host, _round_up(block.size))
        runtime.virtual_memory.free(host, block.span)
        return True

    # ---------------------------------------------------------- attaching

    def attach_for_launch(self, runtime, device, params: bytes) -> None:
        """Attach to `device` every block an 8-byte word of a launch's
        parameter buffer points into (pointers are 8-byte aligned there)."""
        if not self._blocks:
            return
        words = memoryview(params)[:len(params) // 8 * 8].cast("Q")
        for word in set(words):
            self._attach_holding(runtime, word, device)

    def attach_at(self, runtime, address: int, device) -> bool:
        """cudaHostGetDevicePointer: the block holding `address`, attached to
        `device` (False if none holds it)."""
        return bool(self._blocks) and self._attach_holding(runtime, address, device)

    def _attach_holding(self, runtime, address: int, device) -> bool:
        """The block holding `address` attached to `device`; False if none holds it."""
        block = self._holding(address)
        if block is None:
            return False
        with self._attaching:  # two threads launching with one block attach it once
            if block.mirror is None or block.mirror.device is not device:
                self._attach(runtime, block, device)
        return True

    def _holding(self, address: int) -> Block | None:
        with self._lock:
            i = bisect.bisect_right(self._bases, address) - 1
            block = self._blocks[self._bases[i]] if i >= 0 else None
        return block if block is not None and address < block.host + block.size else None

    def _attach(self, runtime, block: Block, device) -> None:
        if block.mirror is not None:
            block.mirror.device.synchronize()  # its kernels may still use it there; their writes come home
            self._detach(runtime, block, keep_bytes=True)
        if device.session.vmm_base != runtime.virtual_memory.window[0]:
            raise CudaError(cudaError.cudaErrorNotSupported,
                            f"a kernel on {device.label} is passed page-locked memory at {block.host:#x}, but its "
                            f"server's driver would not reserve the program's VMM window, where that memory lies")
        length = _round_up(block.size)
        alias = self._share(block, length)
        handle = runtime.new_id()
        fast = runtime.fast
        try:
            device.request("vmm_create", handle=handle, size=block.span)
            try:
                device.request("vmm_map", ptr=block.host, size=block.span, offset=0, handle=handle)
            except BaseException:
                device.request("vmm_release", handle=handle)
                raise
        except BaseException:
            self._unshare(block, alias, length)
            raise
        runtime.allocations.add(block.host, block.span, device)
        slot = fast.mirror_add(block.host, block.size, block.host, device, alias=alias, dirty=True,
                               device_only_reads=False)  # the host's bytes go up before the launch
        if slot < 0:
            runtime.allocations.remove(block.host)
            self._release_device_copy(device, block.host, handle)
            self._unshare(block, alias, length)
            raise CudaError(cudaError.cudaErrorMemoryAllocation,
                            f"page-locked memory at {block.host:#x} for a kernel on {device.label}: too many "
                            f"mapped and managed ranges at once")
        block.mirror = Mirror(slot, block.host, block.size, block.host, device, block.host, block.flags,
                              allocated=True, alias=alias)
        block.handle = handle
        self._mapped.add(block.mirror)
        fast.pinned_block(block.host, block.span, device)

    def _detach(self, runtime, block: Block, keep_bytes: bool, device_copy: bool = True) -> None:
        """The block is plain memory again (its bytes as the host has them);
        its device copy freed, unless it is gone already (`device_copy` false)."""
        mirror, block.mirror = block.mirror, None
        self._mapped.forget(runtime.fast, mirror, keep_alias=True)
        runtime.allocations.remove(block.host)
        if device_copy:
            self._release_device_copy(mirror.device, block.host, block.handle)
        length = _round_up(block.size)
        if keep_bytes:
            self._unshare(block, mirror.alias, length)
        else:
            _libc.munmap(mirror.alias, length)
        runtime.fast.pinned_block(block.host, block.span, None)

    @staticmethod
    def _share(block: Block, length: int) -> int:
        """The block's pages become a memory file's, mapped a second time
        (the alias, which the mirror's downloads write): its bytes kept."""
        try:
            memory = os.memfd_create("rcuda page-locked memory", os.MFD_CLOEXEC)
        except OSError as exc:
            raise CudaError(cudaError.cudaErrorMemoryAllocation, f"page-locked memory at {block.host:#x}: {exc}") \
                from None
        try:
            os.ftruncate(memory, length)
            alias = _map(0, length, mmap.MAP_SHARED, memory)
            if alias is None:
                raise CudaError(cudaError.cudaErrorMemoryAllocation,
                                f"page-locked memory at {block.host:#x}: out of host memory")
            ctypes.memmove(alias, block.host, length)
            if not address_space.place(block.host, length, memory):
                _libc.munmap(alias, length)
                raise CudaError(cudaError.cudaErrorMemoryAllocation,
                                f"page-locked memory at {block.host:#x}: its pages could not be shared")
            return alias
        finally:
            os.close(memory)

    @staticmethod
    def _unshare(block: Block, alias: int, length: int) -> None:
        """Private memory again, with the bytes the alias holds (a forked
        child must not share them with its parent)."""
        address_space.place_private(block.host, length)
        ctypes.memmove(block.host, alias, length)
        _libc.munmap(alias, length)

    @staticmethod
    def _release_device_copy(device, ptr: int, handle: int) -> None:
        try:
            device.request("vmm_unmap", ptr=ptr)
            device.request("vmm_release", handle=handle)
        except RcudaError:  # a lost server or a sticky error: the session frees it in the end
            pass

    # ---------------------------------------------------------- devices and the process

    def forget_device(self, runtime, device) -> None:
        """cudaDeviceReset: the device copies are gone; the blocks attached
        there are plain memory again, with the host's bytes."""
        with self._lock:
            attached = [b for b in self._blocks.values() if b.mirror is not None and b.mirror.device is device]
        with self._attaching:
            for block in attached:
                if block.mirror is not None:
                    self._detach(runtime, block, keep_bytes=True, device_copy=False)

    def forget_after_fork(self) -> None:
        """In a forked child: the blocks are its plain memory (C made the
        attached ones private copies), outside its own session's VMM window;
        cudaFreeHost unmaps them as any (client/memory/host.py)."""
        with self._lock:
            self._blocks, self._bases = {}, []

