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
from dataclasses import dataclass

#: Each device's allocations live inside a window of this size, starting at a
#: base the client assigns, so pointers never collide across devices.
VA_WINDOW_SIZE = 1 << 40


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
