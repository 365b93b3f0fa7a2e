"""Memory pools: stream-ordered allocation (cudaMallocAsync, cudaFreeAsync).

A pool is kept here, in the client.  Each block it holds is one ordinary
allocation on the pool's GPU (`malloc`); the server knows nothing of pools.
A block handed out is in the allocation map like any other device memory;
cudaFreeAsync takes it out of the map and back into its pool's idle list,
still allocated on the server, and a later cudaMallocAsync may hand it out
again without a round trip.

Reuse, the one rule that keeps it correct: an idle block may go to
  * the stream its free was ordered in (stream order makes it safe), and
    streams made to wait for that free through an event (cudaStreamWaitEvent
    on an event recorded after it), unless the pool's
    cudaMemPoolReuseFollowEventDependencies is off;
  * any stream, once the host has seen the free complete: a
    cudaDeviceSynchronize of the stream's device, a cudaStreamSynchronize of
    the stream, a cudaEventSynchronize of an event recorded after the free,
    or a plain cudaFree (CUDA makes the program vouch that its work is done).
rcuda never learns that a free completed without the host waiting for it,
so cudaMemPoolReuseAllowOpportunistic and ...AllowInternalDependencies
are kept but change nothing: CUDA's own behaviour with them off.

Release: blocks whose free is known complete go back to the server
(`free`) at those synchronisations while the pool holds more than its
release threshold, at cudaMemPoolTrimTo, and when a pool is destroyed.
While a device has a pool that a synchronisation would change, its
synchronous calls are made by Python, not C (RemoteDevice.pools_pending).

Sharing between processes (client/runtime/pools.py): a pool created with
a handle type has a share id, 16 random bytes that its shareable handle and
its exported pointers carry; another process's import is a pool of its own,
marked imported, that only maps pointers.  A block once exported
(cudaMemPoolExportPointer) is not reused: its free gives it back to the
server, which withdraws the export, so a stale export cannot open it.
"""
from __future__ import annotations

import itertools
import secrets
import threading
from dataclasses import dataclass, field

from rcuda.errors import CudaError, cudaError

# Handles are values no allocator hands out (see client/streams.py), so a
# stray pointer is not taken for a pool and a destroyed pool's handle is never reused.
POOL_HANDLES_FROM = 0x5F00_0000_0000


@dataclass(eq=False)
class Block:
    base: int
    size: int
    freed_in: object = None   # the Stream whose order its free is in; None once the free is known complete
    freed_at: int = 0         # the process's count of stream-ordered frees at its free
    ordered_for: set = field(default_factory=set)  # other streams made to wait for the free (events)
    exported: bool = False    # cudaMemPoolExportPointer: freed, it goes back to the server (never reused)

    def reusable_in(self, stream) -> bool:
        return self.freed_in is None or stream is self.freed_in or stream in self.ordered_for


class MemoryPool:
    def __init__(self, handle: int, device, is_default: bool, max_size: int = 0, handle_types: int = 0,
                 share_id: bytes | None = None, imported: bool = False):
        self.handle = handle
        self.device = device
        self.is_default = is_default
        self.max_size = max_size  # cudaMemPoolProps.maxSize: 0 is no limit
        self.handle_types = handle_types  # cudaMemPoolProps.handleTypes: how it may be shared
        self.share_id = share_id          # names it to other processes (a shareable pool's, or an import's)
        self.imported = imported          # another process's pool: it maps pointers, never allocates
        self.destroyed = False
        self.release_threshold = 0
        self.follow_event_dependencies = True
        self.allow_opportunistic = True
        self.allow_internal_dependencies = True
        self.reserved = self.reserved_high = 0
        self.used = self.used_high = 0
        self.in_use: dict[int, Block] = {}
        self.idle: list[Block] = []
        self.access: dict = {}  # another device (of the same server) -> cudaMemAccessFlags

    def take_idle(self, size: int, stream) -> Block | None:
        """The smallest idle block of `size` to 2 x `size` bytes that `stream` may reuse."""
        fits = [b for b in self.idle if size <= b.size <= 2 * size and b.reusable_in(stream)]
        if not fits:
            return None
        block = min(fits, key=lambda b: b.size)
        self.idle.remove(block)
        return block

    def hand_out(self, block: Block) -> None:
        block.freed_in, block.ordered_for = None, set()
        self.in_use[block.base] = block
        self.used += block.size
        self.used_high = max(self.used_high, self.used)

    def releasable(self, keep: int) -> list[Block]:
        """Idle blocks known complete to give back until at most `keep`
        bytes stay reserved, largest first; taken out of the pool."""
        chosen = []
        for block in sorted((b for b in self.idle if b.freed_in is None), key=lambda b: -b.size):
            if self.reserved <= keep:
                break
            self.idle.remove(block)
            self.reserved -= block.size
            chosen.append(block)
        return chosen

    def waits_for_sync(self) -> bool:
        """Whether a synchronisation may change this pool: a free to see
        complete, or memory above the threshold to release."""
        return any(b.freed_in is not None for b in self.idle) or (
            self.reserved > self.release_threshold and any(b.freed_in is None for b in self.idle))


class MemoryPools:
    """Every pool of the process, and which block of which pool each
    handed-out pointer is."""

    def __init__(self, allocations):
        self.allocations = allocations  # client/memory/allocations.py: handed-out blocks are device memory
        self._lock = threading.Lock()   # a leaf: requests to servers are made outside it
        self._handles = itertools.count(POOL_HANDLES_FROM, 0x10)
        self._pools: dict[int, MemoryPool] = {}   # live pools by handle
        self._defaults: dict[object, MemoryPool] = {}
        self._current: dict[object, MemoryPool] = {}
        self._owner: dict[int, MemoryPool] = {}   # base of a handed-out block -> its pool
        self._frees = 0                           # stream-ordered frees so far
        #: C's fast path (client/transport/fast_path.py): it records events
        #: only while there are no frees for them to follow.
        self.fast = None
        self._pending: set = set()                # devices whose synchronisations pools wait for

    # ---------------------------------------------------------- pools

    def default(self, device) -> MemoryPool:
        with self._lock:
            pool = self._defaults.get(device)
            if pool is None:
                pool = self._defaults[device] = MemoryPool(next(self._handles), device, True)
                self._pools[pool.handle] = pool
            return pool

    def current(self, device) -> MemoryPool:
        pool = self._current.get(device)
        return pool if pool is not None else self.default(device)

    def set_current(self, device, pool: MemoryPool) -> None:
        if pool.imported:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            "cudaDeviceSetMemPool: an imported pool cannot allocate (another process's)")
        if pool.device is not device:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cudaDeviceSetMemPool: the pool belongs to {pool.device.label}, not {device.label}")
        self._current[device] = pool

    def create(self, device, max_size: int, handle_types: int = 0) -> MemoryPool:
        share_id = secrets.token_bytes(16) if handle_types else None
        with self._lock:
            pool = MemoryPool(next(self._handles), device, False, max_size, handle_types, share_id)
            self._pools[pool.handle] = pool
        return pool

    def import_pool(self, device, share_id: bytes, call: str) -> MemoryPool:
        """cudaMemPoolImportFromShareableHandle: another process's pool, here."""
        with self._lock:
            if any(p.share_id == share_id and not p.imported for p in self._pools.values()):
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"{call}: the pool is this process's own (import it in another)")
            pool = MemoryPool(next(self._handles), device, False, share_id=share_id, imported=True)
            self._pools[pool.handle] = pool
        return pool

    def exported_block(self, ptr: int, call: str) -> tuple[MemoryPool, Block]:
        """cudaMemPoolExportPointer: the shareable pool's block handed out at
        `ptr`, marked exported."""
        with self._lock:
            pool = self._owner.get(ptr)
            block = pool.in_use.get(ptr) if pool is not None else None
            if block is None:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"{call}: {ptr:#x} is not the start of memory a pool handed out")
            if pool.share_id is None:
                raise CudaError(cudaError.cudaErrorInvalidValue,
                                f"{call}: {ptr:#x} is from a pool created without handle types "
                                f"(cudaMemPoolProps.handleTypes): not shareable")
            block.exported = True
        return pool, block

    def pool(self, handle: int, call: str) -> MemoryPool:
        pool = self._pools.get(handle)
        if pool is None:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"{call}: {handle:#x} is not a memory pool (destroyed, or not a cudaMemPool_t)")
        return pool

    def destroy(self, pool: MemoryPool) -> None:
        """Its idle blocks go back to the server now (the server frees after
        the work sent before, so frees not yet complete are safe too); blocks
        still handed out go when they are freed."""
        if pool.is_default:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"cudaMemPoolDestroy: the default pool of {pool.device.label} cannot be destroyed")
        with self._lock:
            self._pools.pop(pool.handle, None)
            pool.destroyed = True
            if self._current.get(pool.device) is pool:
                del self._current[pool.device]  # the default pool is current again, as in CUDA
            released, pool.idle = pool.idle, []
            pool.reserved -= sum(b.size for b in released)
        self._give_back(pool.device, released)
        self._tell_devices()

    # ---------------------------------------------------------- allocation

    def allocate(self, pool: MemoryPool, size: int, stream) -> int:
        with self._lock:
            block = pool.take_idle(size, stream)
            if block is not None:
                pool.hand_out(block)
                self._owner[block.base] = pool
        if block is None:
            block = self._new_block(pool, size)
        # Taking a block leaves no more work for a synchronisation: devices
        # are told again there (a word now stale only sends a call to Python).
        self.allocations.add(block.base, block.size, pool.device)
        return block.base

    def _new_block(self, pool: MemoryPool, size: int) -> Block:
        if pool.max_size and pool.reserved + size > pool.max_size:
            self.trim(pool, pool.max_size - size)
            if pool.reserved + size > pool.max_size:
                raise CudaError(cudaError.cudaErrorMemoryAllocation,
                                f"cudaMallocAsync of {size} bytes: the pool holds {pool.reserved} of its "
                                f"{pool.max_size} bytes (cudaMemPoolProps.maxSize)")
        try:
            base = pool.device.malloc(size)
        except CudaError as exc:
            if exc.status != cudaError.cudaErrorMemoryAllocation:
                raise
            # As CUDA does: unused pool memory goes back to make room, then once more.
            for other in self._pools_of(pool.device):
                self.trim(other, 0)
            base = pool.device.malloc(size)
        block = Block(base, size)
        for device, flags in list(pool.access.items()):
            if flags:
                _open_to(pool, base, device, flags)
        with self._lock:
            pool.reserved += size
            pool.reserved_high = max(pool.reserved_high, pool.reserved)
            pool.hand_out(block)
            self._owner[base] = pool
        return block

    def set_access(self, pool: MemoryPool, changes: dict) -> None:
        """cudaMemPoolSetAccess: the pool's blocks, handed out and idle, are
        opened to (or closed for) other GPUs of its server now, and the
        blocks it makes later when they are made."""
        with self._lock:
            blocks = [*pool.in_use.values(), *pool.idle]
            changed = {d: f for d, f in changes.items() if pool.access.get(d, 0) != f}
            pool.access.update(changes)
        for device, flags in changed.items():
            for block in blocks:
                _open_to(pool, block.base, device, flags)

    def owner(self, ptr: int) -> MemoryPool | None:
        """The pool whose handed-out block starts at `ptr`, if any."""
        return self._owner.get(ptr)

    def free(self, ptr: int, stream=None) -> None:
        """Back into its pool: in `stream`'s order (cudaFreeAsync), or, with
        no stream, complete at once (cudaFree)."""
        with self._lock:
            pool = self._owner.pop(ptr, None)
            if pool is None:  # another thread freed it first
                raise CudaError(cudaError.cudaErrorInvalidValue, f"free of {ptr:#x}: freed already")
            block = pool.in_use.pop(ptr)
            pool.used -= block.size
            release = pool.destroyed or block.exported  # an exported block's export ends with it
            if release:
                pool.reserved -= block.size
            else:
                self._frees += 1
                if self._frees == 1 and self.fast is not None:
                    self.fast.events_welcome(False)  # each record must now note its place among the frees
                block.freed_in, block.freed_at = stream, self._frees
                pool.idle.append(block)
                # Work for a synchronisation: cheaper than _tell_devices, on the hot path.
                self._now_pending(stream.device if stream is not None else pool.device)
        self.allocations.remove(ptr)
        if release:
            self._give_back(pool.device, [block])

    # ---------------------------------------------------------- stream order

    def event_recorded(self, event, stream) -> None:
        """An event records how many frees came before it, for
        event_waited/event_synchronized."""
        event.frees_before = (stream, self._frees)

    def event_waited(self, stream, event) -> None:
        """cudaStreamWaitEvent: `stream` now comes after the frees before the event in its stream."""
        if event.frees_before is None:
            return
        freeing, count = event.frees_before
        with self._lock:
            for pool in self._pools.values():
                if pool.follow_event_dependencies:
                    for block in pool.idle:
                        if block.freed_in is freeing and block.freed_at <= count:
                            block.ordered_for.add(stream)

    def synchronized(self, device, stream=None) -> None:
        """The host waited for `device`'s work (or only `stream`'s): those
        frees are complete; memory above the thresholds goes back."""
        self._completed(lambda b: b.freed_in.device is device if stream is None else b.freed_in is stream)

    def event_synchronized(self, event) -> None:
        if event.frees_before is None:
            self._completed(lambda b: False)
            return
        freeing, count = event.frees_before
        self._completed(lambda b: b.freed_in is freeing and b.freed_at <= count)

    def _completed(self, covered) -> None:
        releases = []
        with self._lock:
            for pool in self._pools.values():
                for block in pool.idle:
                    if block.freed_in is not None and covered(block):
                        block.freed_in, block.ordered_for = None, set()
                releases.append((pool, pool.releasable(pool.release_threshold)))
        for pool, blocks in releases:
            self._give_back(pool.device, blocks)
        self._tell_devices()

    def trim(self, pool: MemoryPool, keep: int) -> None:
        with self._lock:
            blocks = pool.releasable(max(keep, 0))
        self._give_back(pool.device, blocks)
        self._tell_devices()

    def changed(self) -> None:
        """An attribute changed: whether a synchronisation has work may too."""
        self._tell_devices()

    # ---------------------------------------------------------- reset, fork

    def forget_device(self, device) -> None:
        """cudaDeviceReset freed all the process's memory on `device`: its
        created pools are gone, its default pool is empty and as new (under
        the same handle), and frees in its streams are over."""
        with self._lock:
            for pool in [p for p in self._pools.values() if p.device is device]:
                for base in pool.in_use:
                    self._owner.pop(base, None)
                del self._pools[pool.handle]
                pool.destroyed = True
                if pool.is_default:
                    self._pools[pool.handle] = self._defaults[device] = MemoryPool(pool.handle, device, True)
            self._current.pop(device, None)
            for pool in self._pools.values():
                for block in pool.idle:
                    if block.freed_in is not None and block.freed_in.device is device:
                        block.freed_in, block.ordered_for = None, set()
        self._tell_devices()

    def clear(self) -> None:
        with self._lock:
            self._pools.clear()
            self._defaults.clear()
            self._current.clear()
            self._owner.clear()
            self._pending.clear()

    # ---------------------------------------------------------- helpers

    def _pools_of(self, device) -> list[MemoryPool]:
        with self._lock:
            return [p for p in self._pools.values() if p.device is device]

    def _give_back(self, device, blocks: list[Block]) -> None:
        for block in blocks:
            device.free(block.base)

    def _now_pending(self, device) -> None:
        """(Under the lock.) A synchronisation on `device` has pool work."""
        if device not in self._pending:
            self._pending.add(device)
            device.pools_pending(True)

    def _tell_devices(self) -> None:
        """Tell each device whether its synchronisations have pool work
        (then Python makes them, not C).  Under the lock, so that two
        threads cannot leave a stale word; a device's lock is taken last."""
        with self._lock:
            pending = set()
            for pool in self._pools.values():
                pending.update(b.freed_in.device for b in pool.idle if b.freed_in is not None)
                if pool.waits_for_sync():
                    pending.add(pool.device)
            for device in pending ^ self._pending:
                device.pools_pending(device in pending)
            self._pending = pending


def _open_to(pool: MemoryPool, base: int, device, flags: int) -> None:
    """Kernels on `device` may use (flags 0: may not) the pool's block at `base`."""
    pool.device.request("mem_access", ptr=base, peer=device.local_index, flags=flags)
