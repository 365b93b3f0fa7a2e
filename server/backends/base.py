"""The interface every backend implements.

A `Backend` knows the GPUs of one server; `open_device` gives a `Device`, one
GPU as seen by one client session.  A session's worker drives each `Device`
from a single thread, so implementations need no locking of their own.

Names follow the CUDA runtime (`malloc`, `memcpy_htod`, `launch`, ...).
Failures raise `rcuda.errors.CudaError` with the status a real GPU would give
(e.g. cudaErrorIllegalAddress for an out-of-bounds access in a kernel); the
worker turns them into error replies, and decides which are sticky.
"""
from __future__ import annotations

import abc
import bisect
from dataclasses import dataclass

from rcuda.errors import CudaError, cudaError

#: Each device's allocations live inside a window of this size, starting at a
#: base the client assigns, so pointers never collide across devices.
VA_WINDOW_SIZE = 1 << 40

#: cudaMalloc's guaranteed alignment.
ALLOCATION_ALIGNMENT = 256


@dataclass(frozen=True)
class ParamLayout:
    """Where each kernel parameter sits in the packed parameter buffer."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def buffer_size(self) -> int:
        return max((o + s for o, s in zip(self.offsets, self.sizes)), default=0)


class Device(abc.ABC):
    """One GPU, as seen by one client session."""

    index: int  # server-side device ordinal

    @abc.abstractmethod
    def properties(self) -> dict:
        """cudaDeviceProp fields (CUDA's names) -> values; `name` is a str."""

    @abc.abstractmethod
    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes, as cudaMemGetInfo."""

    @abc.abstractmethod
    def malloc(self, size: int) -> int:
        """Allocate `size` bytes of device memory; returns the device address."""

    @abc.abstractmethod
    def free(self, ptr: int) -> None:
        """Free an allocation made by `malloc` (cudaErrorInvalidValue otherwise)."""

    @abc.abstractmethod
    def memcpy_htod(self, dst: int, data: memoryview) -> None:
        """Copy host bytes to device address `dst`."""

    @abc.abstractmethod
    def memcpy_dtoh(self, src: int, size: int) -> memoryview:
        """Copy `size` bytes from device address `src`; returns them."""

    @abc.abstractmethod
    def memcpy_dtod(self, dst: int, src: int, size: int) -> None:
        """Copy between two device addresses of this device."""

    @abc.abstractmethod
    def memset(self, ptr: int, value: int, size: int) -> None:
        """Set `size` bytes at `ptr` to the low byte of `value`."""

    @abc.abstractmethod
    def load_module(self, key: str, image: bytes) -> None:
        """Load a fatbinary image under `key` (a content hash)."""

    @abc.abstractmethod
    def get_function(self, module_key: str, name: str, layout: ParamLayout) -> object:
        """Look up kernel `name` (mangled) in a loaded module; returns a handle
        for `launch`.  cudaErrorInvalidDeviceFunction if it has no code here."""

    @abc.abstractmethod
    def launch(self, function: object, grid: tuple[int, int, int], block: tuple[int, int, int],
               params: bytes, shared_mem: int, stream: int) -> None:
        """Launch a kernel with its packed parameter buffer."""

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait for all work on the device (cudaDeviceSynchronize)."""

    @abc.abstractmethod
    def close(self) -> None:
        """End the session on this device: free everything it allocated."""

    def take_output(self) -> str:
        """Device output (printf) produced since the last call, and forget it.
        Backends that cannot capture device output return ""."""
        return ""

    # -- multi-GPU (server/peer.py).  Concrete defaults, so a backend that
    # knows nothing of peers still works: copies between GPUs then go
    # through host memory, and direct peer access is refused.

    def check_range(self, ptr: int, size: int, what: str) -> None:
        """cudaErrorInvalidValue unless [ptr, ptr + size) lies inside one
        allocation of this session.  Backends keeping their allocations in
        `self._memory` (an AllocationTable) get this for free."""
        table = getattr(self, "_memory", None)
        if size and isinstance(table, AllocationTable):
            table.require(ptr, size, what)

    def can_access_peer(self, peer: int) -> bool:
        """Whether kernels on this GPU can load and store the memory of
        server-side GPU `peer` once peer access is enabled."""
        return False

    def set_peer_access(self, peer: int, enable: bool) -> None:
        """cudaDeviceEnablePeerAccess / cudaDeviceDisablePeerAccess."""
        raise CudaError(cudaError.cudaErrorPeerAccessUnsupported,
                        f"GPU {self.index} cannot access GPU {peer} directly on this backend "
                        f"(cudaMemcpyPeer still copies between them)")


class Backend(abc.ABC):
    """The GPUs of one server."""

    name: str

    @abc.abstractmethod
    def device_count(self) -> int:
        """How many GPUs this server serves."""

    @abc.abstractmethod
    def open_device(self, index: int, va_base: int | None = None) -> Device:
        """Open server-side GPU `index` for one session.  Allocations are placed
        in [va_base, va_base + VA_WINDOW_SIZE) when `va_base` is given."""


# ---------------------------------------------------------------- helpers
# Shared by the backends, so every backend checks pointers and launch
# configurations the same way.


@dataclass
class Allocation:
    start: int
    size: int
    memory: object = None  # the backend's own handle on the bytes (sim: a numpy array)

    @property
    def end(self) -> int:
        return self.start + self.size


class AllocationTable:
    """A session's allocations on one device, found by address.

    Every pointer coming from a client is looked up here before the backend
    touches memory, so a session can only reach what it allocated itself.
    """

    def __init__(self):
        self._starts: list[int] = []  # sorted
        self._by_start: dict[int, Allocation] = {}
        self.bytes_in_use = 0

    def __len__(self) -> int:
        return len(self._starts)

    def __iter__(self):
        return (self._by_start[start] for start in self._starts)

    def add(self, allocation: Allocation) -> None:
        bisect.insort(self._starts, allocation.start)
        self._by_start[allocation.start] = allocation
        self.bytes_in_use += allocation.size

    def remove(self, ptr: int) -> Allocation:
        """Forget the allocation starting at `ptr`; cudaErrorInvalidValue for
        any other pointer (unknown, interior, or already freed)."""
        allocation = self._by_start.pop(ptr, None)
        if allocation is None:
            containing = self.containing(ptr, 1)
            where = (f"it points {ptr - containing.start} bytes into the allocation at {containing.start:#x}"
                     if containing else "it is not an allocation of this session (or was already freed)")
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaFree({ptr:#x}): {where}")
        del self._starts[bisect.bisect_left(self._starts, ptr)]
        self.bytes_in_use -= allocation.size
        return allocation

    def containing(self, ptr: int, size: int) -> Allocation | None:
        """The allocation holding all of [ptr, ptr + size), or None."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            return None
        allocation = self._by_start[self._starts[i]]
        return allocation if ptr + size <= allocation.end else None

    def require(self, ptr: int, size: int, what: str) -> Allocation:
        """`containing`, or cudaErrorInvalidValue naming the bad range.  This is
        what cudaMemcpy/cudaMemset return for a pointer they cannot use
        (cudaErrorInvalidDevicePointer is deprecated and no longer returned)."""
        allocation = self.containing(ptr, size)
        if allocation is None:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            f"{what}: [{ptr:#x}, {ptr + size:#x}) is not inside one allocation of this session")
        return allocation

    def clear(self) -> list[Allocation]:
        allocations = list(self)
        self._starts.clear()
        self._by_start.clear()
        self.bytes_in_use = 0
        return allocations


def check_launch_configuration(props: dict, grid, block, shared_mem: int) -> None:
    """cudaErrorInvalidConfiguration, naming the limit, for a launch the
    device described by `props` (cudaDeviceProp fields) would refuse."""
    max_block, max_grid = props["maxThreadsDim"], props["maxGridSize"]
    max_shared = props.get("sharedMemPerBlockOptin") or props["sharedMemPerBlock"]
    problem = None
    if min(grid) < 1 or min(block) < 1:
        problem = f"grid {tuple(grid)} / block {tuple(block)} has a zero dimension"
    elif any(b > m for b, m in zip(block, max_block)):
        problem = f"block {tuple(block)} exceeds maxThreadsDim {tuple(max_block)}"
    elif block[0] * block[1] * block[2] > props["maxThreadsPerBlock"]:
        problem = (f"block {tuple(block)} has {block[0] * block[1] * block[2]} threads, more than "
                   f"maxThreadsPerBlock {props['maxThreadsPerBlock']}")
    elif any(g > m for g, m in zip(grid, max_grid)):
        problem = f"grid {tuple(grid)} exceeds maxGridSize {tuple(max_grid)}"
    elif shared_mem > max_shared:
        problem = f"{shared_mem} bytes of dynamic shared memory is more than the {max_shared} a block may use"
    if problem:
        raise CudaError(cudaError.cudaErrorInvalidConfiguration, problem)
