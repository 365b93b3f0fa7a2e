"""Handles the driver API gives out for modules, functions, libraries and
their kernels (CUmodule, CUfunction, CUlibrary, CUkernel; the runtime's
cudaLibrary_t and cudaKernel_t are the same objects), shared by the modules
of client/driver/ and the runtime's (client/driver/loading.py loads them).

A CUfunction stands for a runtime `Kernel` (client/modules.py): the same
parameter layout, the same function ids on each device, the same launch
path (client/runtime/core.py `launch`).  Handles are numbers from a range no
allocator hands out, so a stray pointer is never taken for one, and a
handle is never reused: a destroyed object's handle stays invalid.
"""
from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from rcuda.driver_errors import CUresult, DriverError

from ..modules import Kernel, Module

#: Where driver handles start (streams, events and pools have ranges of their own).
DRIVER_HANDLES_FROM = 0x5C00_0000_0000


@dataclass(eq=False)
class DriverModule:
    handle: int
    module: Module          # the image, as the runtime keeps a fatbinary
    device: object          # the RemoteDevice of the context it was loaded in
    functions: dict = field(default_factory=dict)  # name -> DriverFunction
    unloaded: bool = False


@dataclass(eq=False)
class DriverFunction:
    handle: int
    kernel: Kernel
    module: DriverModule
    #: The pre-CUDA-4 launch state cuFuncSetBlockShape, cuFuncSetSharedSize
    #: and cuParamSet* keep (client/driver/legacy_launch.py); None until set.
    legacy: object = None


@dataclass(eq=False)
class DriverLibrary:
    """A CUlibrary (cudaLibrary_t): an image loaded into each context that needs it."""

    handle: int
    module: Module                               # the image, shared by its contexts
    modules: dict = field(default_factory=dict)  # RemoteDevice -> DriverModule
    kernels: dict = field(default_factory=dict)  # name -> DriverKernel


@dataclass(eq=False)
class DriverKernel:
    """A CUkernel (cudaKernel_t): a library's kernel, in whichever context launches it."""

    handle: int
    library: DriverLibrary
    name: str


class DriverHandles:
    """Every live driver object of the process, by handle."""

    def __init__(self):
        self._next = itertools.count(DRIVER_HANDLES_FROM, 0x10)
        self._lock = threading.Lock()
        self._objects: dict[int, object] = {}

    def new_handle(self) -> int:
        return next(self._next)

    def add(self, obj) -> None:
        with self._lock:
            self._objects[obj.handle] = obj

    def remove(self, handle: int) -> None:
        with self._lock:
            self._objects.pop(handle, None)

    def find(self, handle: int, kind: type):
        """The live `kind` behind `handle`, or None."""
        obj = self._objects.get(handle)
        return obj if isinstance(obj, kind) else None

    def get(self, handle: int, kind: type, call: str, error: CUresult = CUresult.CUDA_ERROR_INVALID_HANDLE):
        """The live `kind` behind `handle`; `error` (CUDA's code for a bad
        handle of that kind) otherwise."""
        obj = self._objects.get(handle)
        if not isinstance(obj, kind):
            raise DriverError(error, f"{call}: {handle:#x} is not a live {kind.__name__}")
        return obj


#: The process's driver objects.
handles = DriverHandles()
