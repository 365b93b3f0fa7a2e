"""A session's address windows on this server (docs/design.md "Pointers").

Device pointers pass through the client unchanged, so the client needs every
GPU's allocations in a range of its own: each GPU of the session allocates
inside its window, and the program's cuMemMap ranges lie in one VMM window
that the session's GPUs share (a CUDA reservation is valid on every
device).  The backend reserves both where the client asked when its driver
takes the hint, elsewhere otherwise; the client settles with where they
are, asking for a window to move when it collides with another server's.
A window is the session's until it ends: cudaDeviceReset keeps it, so the
program's pointers stay valid addresses.
"""
from __future__ import annotations

import threading

from rcuda.errors import CudaError, cudaError
from rcuda.protocol import VA_WINDOW_SIZE, VMM_WINDOW_SIZE


class SessionWindows:
    def __init__(self, backend):
        self._backend = backend
        self._lock = threading.Lock()  # the GPUs' threads open and move at once
        self._devices: dict[int, object] = {}  # GPU index -> its window (the backend's reservation)
        self.vmm = None  # the VMM window's reservation, once a GPU opened with a vmm_base

    def open_device(self, index: int, hint: int | None):
        """The window GPU `index` allocates in (None: the backend places
        allocations as it likes; only for clients that ask for none)."""
        if hint is None:
            return None
        window = self._backend.reserve(index, VA_WINDOW_SIZE, hint)
        with self._lock:
            self._devices[index] = window
        return window

    def open_vmm(self, index: int, hint: int | None) -> int | None:
        """The session's VMM window: reserved by the first GPU that opens
        with a hint, the same for the others."""
        with self._lock:
            if self.vmm is None and hint is not None:
                self.vmm = self._backend.reserve(index, VMM_WINDOW_SIZE, hint)
            return None if self.vmm is None else self.vmm.base

    def move_device(self, index: int, hint: int):
        """Reserve GPU `index`'s window again, then give back the old one
        (held meanwhile, so a driver that ignores hints answers elsewhere)."""
        with self._lock:
            old = self._devices.get(index)
        if old is None:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"move_window: GPU {index} opened without a window")
        window = self._backend.reserve(index, VA_WINDOW_SIZE, hint)
        old.release()
        with self._lock:
            self._devices[index] = window
        return window

    def move_vmm(self, index: int, hint: int) -> int:
        with self._lock:
            if self.vmm is None:
                raise CudaError(cudaError.cudaErrorInvalidValue, "move_window: the session has no VMM window")
            moved = self._backend.reserve(index, VMM_WINDOW_SIZE, hint)
            self.vmm.release()
            self.vmm = moved
            return moved.base

    def check_vmm(self, ptr: int, size: int) -> None:
        """cuMemMap's range must lie in the VMM window: the addresses the
        client hands out, and that the driver reserved here."""
        vmm = self.vmm
        if vmm is None or not (vmm.base <= ptr and ptr + size <= vmm.base + vmm.size):
            where = "the session has no VMM window" if vmm is None else \
                f"the server's VMM window is [{vmm.base:#x}, {vmm.base + vmm.size:#x})"
            raise CudaError(cudaError.cudaErrorInvalidValue, f"cuMemMap({ptr:#x}, {size}): {where}")

    def close_device(self, index: int) -> None:
        with self._lock:
            window = self._devices.pop(index, None)
        if window is not None:
            window.release()

    def close(self) -> None:
        """The session's end: every window goes."""
        for index in list(self._devices):
            self.close_device(index)
        with self._lock:
            vmm, self.vmm = self.vmm, None
        if vmm is not None:
            vmm.release()
