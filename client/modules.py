"""Kernels the program registered, and how to pack their arguments.

The program's constructors call __cudaRegisterFatBinary (once per
translation unit) and __cudaRegisterFunction (once per kernel): we keep
where the fatbinary is (its bytes are read at their first use) and map each kernel's host stub address to (module, mangled
name).  A kernel's parameter layout comes from the fatbinary (parsed lazily,
on the first launch of one of its kernels), because a launch's `void **args`
says nothing about sizes.
"""
from __future__ import annotations

import functools
import hashlib
import threading
from dataclasses import dataclass, field
from typing import Callable

from rcuda import fatbin
from rcuda.errors import CudaError, cudaError
from rcuda.launch_rules import MAX_PARAM_BYTES


@dataclass(eq=False)
class Module:
    """One registered fatbinary (one translation unit of the program), or an
    image the driver API loaded (a fatbinary, a cubin or PTX)."""

    read_image: Callable[[], bytes]  # the image's bytes (see `image`)
    kernels: dict = field(default_factory=dict)  # host stub address -> mangled name
    #: __managed__ variables: (where the program keeps its host pointer, device name, size)
    managed_variables: list = field(default_factory=list)
    managed_ready: bool = False  # those are set up (client/memory/managed.py)

    @functools.cached_property
    def image(self) -> bytes:
        """Read at its first use (a launch of one of its kernels, a symbol),
        not at registration: a program registers far more than it uses
        (PyTorch, about 490 fatbinaries and 700 MB of them), and its
        fatbinaries stay in its memory until they are unregistered."""
        return self.read_image()

    @functools.cached_property
    def key(self) -> str:
        """Content hash: a server caches a module under it."""
        return hashlib.blake2b(self.image, digest_size=16).hexdigest()

    @functools.cached_property
    def parsed(self) -> fatbin.Fatbin:
        return fatbin.parse_image(self.image)


@dataclass(frozen=True)
class KernelParams:
    """Offsets and sizes of a kernel's parameters, in ordinal order."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    buffer_size: int

    def pack(self, ffi, args) -> bytes:
        """Copy each `args[i]` (a pointer to parameter i) into one buffer."""
        buf = bytearray(self.buffer_size)
        for i, (offset, size) in enumerate(zip(self.offsets, self.sizes)):
            buf[offset:offset + size] = ffi.buffer(args[i], size)
        return bytes(buf)


@dataclass(frozen=True, eq=False)
class DeviceVariable:
    """A __device__ or __constant__ variable, by its host shadow's address."""

    module: Module
    name: str  # the device-side (mangled) name
    size: int
    constant: bool


@dataclass(eq=False)
class Kernel:
    module: Module
    name: str  # mangled

    @functools.cached_property
    def params(self) -> KernelParams:
        try:
            info = self.module.parsed.kernels()[self.name]
        except KeyError:
            raise CudaError(cudaError.cudaErrorInvalidDeviceFunction,
                            f"kernel {self.name} is registered but absent from its fatbinary") from None
        except fatbin.FatbinError as exc:
            raise CudaError(cudaError.cudaErrorInvalidKernelImage,
                            f"cannot read the fatbinary holding {self.name}: {exc}") from None
        # A layout the client cannot vouch for fails the launch: parameters
        # left out would only fail later, inside the kernel.
        problem = info.layout_error()
        if problem is None and info.param_buffer_size > MAX_PARAM_BYTES:
            problem = f"its parameters take {info.param_buffer_size} bytes, more than CUDA's {MAX_PARAM_BYTES}"
        if problem is not None:
            raise CudaError(cudaError.cudaErrorInvalidKernelImage,
                            f"cannot lay out the parameters of kernel {self.name}: {problem}")
        params = sorted(info.params, key=lambda p: p.ordinal)
        return KernelParams(tuple(p.offset for p in params), tuple(p.size for p in params),
                            info.param_buffer_size)


class KernelRegistry:
    """Host stub address -> Kernel and host shadow address -> variable, for
    every registered module."""

    def __init__(self):
        self._lock = threading.Lock()
        self.modules: dict[int, Module] = {}  # handle address -> Module
        self._kernels: dict[int, Kernel] = {}
        self._variables: dict[int, DeviceVariable] = {}

    def add_module(self, handle: int, read_image: Callable[[], bytes]) -> Module:
        module = Module(read_image)
        with self._lock:
            self.modules[handle] = module
        return module

    def add_function(self, handle: int, host_fun: int, name: str) -> None:
        with self._lock:
            module = self.modules.get(handle)
            if module is None:
                raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                                f"__cudaRegisterFunction for {name} with an unknown module handle")
            module.kernels[host_fun] = name
            self._kernels[host_fun] = Kernel(module, name)

    def add_variable(self, handle: int, host_var: int, name: str, size: int, constant: bool) -> None:
        with self._lock:
            module = self.modules.get(handle)
            if module is None:
                raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                                f"__cudaRegisterVar for {name} with an unknown module handle")
            self._variables[host_var] = DeviceVariable(module, name, size, constant)

    def add_managed_variable(self, handle: int, host_pointer_at: int, name: str, size: int) -> None:
        with self._lock:
            module = self.modules.get(handle)
            if module is None:
                raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                                f"__cudaRegisterManagedVar for {name} with an unknown module handle")
            module.managed_variables.append((host_pointer_at, name, size))

    def module(self, handle: int) -> Module:
        module = self.modules.get(handle)
        if module is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"no module is registered as {handle:#x}")
        return module

    def variable(self, host_var: int) -> DeviceVariable:
        variable = self._variables.get(host_var)
        if variable is None:
            raise CudaError(cudaError.cudaErrorInvalidSymbol,
                            f"no __device__ variable is registered at host address {host_var:#x}")
        return variable

    def remove_module(self, handle: int) -> None:
        with self._lock:
            module = self.modules.pop(handle, None)
            if module:
                for host_fun in module.kernels:
                    self._kernels.pop(host_fun, None)
                for host_var in [a for a, v in self._variables.items() if v.module is module]:
                    del self._variables[host_var]

    def kernel(self, host_fun: int) -> Kernel:
        kernel = self._kernels.get(host_fun)
        if kernel is None:
            raise CudaError(cudaError.cudaErrorInvalidDeviceFunction,
                            f"no kernel is registered at host address {host_fun:#x}")
        return kernel
