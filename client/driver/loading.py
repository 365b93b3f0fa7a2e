"""Images loaded at run time, for both APIs: modules (CUmodule), libraries
(CUlibrary, cudaLibrary_t) and their kernels (CUkernel, cudaKernel_t), and
the CUfunction of each kernel on a device.  The driver's functions
(client/driver/modules.py) and the runtime's (client/runtime/library_management.py)
are two faces of what is here.

An image is a fatbinary, a cubin or PTX text (rcuda/fatbin.py reads kernel
names and parameter layouts from any of them).  Loading sends it to a GPU
at once (the `module` op), so a bad image or bad PTX fails in the load
call, with the JIT's log in the program's log buffer.  A module is a
runtime `Module`, a CUfunction a runtime `Kernel`: launches take the
runtime's path.  A library is context-independent: its image is loaded on
a GPU the first time that GPU needs it.  Unloading makes the handles
invalid; the server keeps the image for the session.

A kernel handle is a library's DriverKernel or, for one of the program's
own kernels, its host stub's address (what cudaGetKernel and
__cudaGetKernel give).  Failures are the driver's statuses (DriverError),
whose `status` is the runtime's error for the same, or the runtime's
(CudaError), which the driver's functions return as their CUresult.

Imports no client/runtime/ module: the runtime builds on this.
"""
from __future__ import annotations

from pathlib import Path

from rcuda import fatbin
from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError

from .. import interposer
from ..interposer import out_pointer
from ..modules import Kernel, Module
from .handles import DriverFunction, DriverKernel, DriverLibrary, DriverModule, handles
from .jit_options import JitOptions

#: No module image is this big: a size read from a corrupt header is refused.
MAX_IMAGE_BYTES = 1 << 31

#: The program's own modules as DriverModules, one per device: (module key, RemoteDevice) -> DriverModule.
_runtime_modules: dict = {}


# ---------------------------------------------------------------- images


def _bytes_at(pointer, offset: int, size: int) -> bytes:
    return bytes(interposer.ffi.buffer(interposer.ffi.cast("char *", pointer) + offset, size))


def read_image(image, what: str) -> bytes:
    """The bytes of the module image at `image`: a fatbinary (or the
    registration wrapper around one), a cubin, or NUL-terminated PTX."""
    out_pointer(image, "image")
    ffi = interposer.ffi
    kind = fatbin.image_kind(ffi.string(ffi.cast("char *", image), 4))
    try:
        if kind == "wrapper":
            return read_image(ffi.cast("void **", image)[1], what)
        if kind == fatbin.KIND_PTX:
            return ffi.string(ffi.cast("char *", image))
        size = (fatbin.fatbin_size(_bytes_at(image, 0, fatbin.CONTAINER_HEADER.size)) if kind == "fatbin"
                else fatbin.elf_size(lambda offset, size: _bytes_at(image, offset, size)))
    except (fatbin.FatbinError, ValueError) as exc:  # struct.error is a ValueError
        raise DriverError(CUresult.CUDA_ERROR_INVALID_IMAGE, f"{what}: {exc}") from None
    if size > MAX_IMAGE_BYTES:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_IMAGE, f"{what}: the image claims {size} bytes")
    return _bytes_at(image, 0, size)


def read_file(path, what: str) -> bytes:
    out_pointer(path, "path")
    name = interposer.ffi.string(path).decode(errors="replace")
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        raise DriverError(CUresult.CUDA_ERROR_FILE_NOT_FOUND, f"{what}: cannot read {name}: {exc}") from None


# ---------------------------------------------------------------- modules


def load(image: bytes, what: str, jit: JitOptions | None = None, device=None) -> DriverModule:
    """A new CUmodule: `image` loaded on the current device (or on `device`)."""
    module = Module(lambda: image)
    try:
        module.parsed.kernels()
        module.parsed.variables()
    except fatbin.FatbinError as exc:
        if jit is not None:
            jit.report(error=str(exc))
        raise DriverError(CUresult.CUDA_ERROR_INVALID_IMAGE, f"{what}: {exc}") from None
    device = interposer.rt.device() if device is None else device
    try:
        info = device.ensure_module(module)
    except CudaError as exc:
        if jit is not None:
            jit.report(error=exc.message)
        raise CudaError(exc.status, f"{what}: {exc.message}") from None
    if jit is not None:
        jit.report(info=info)
    loaded = DriverModule(handles.new_handle(), module, device)
    handles.add(loaded)
    return loaded


def unload(loaded: DriverModule) -> None:
    """The module's handle and its functions' are invalid from now on."""
    loaded.unloaded = True
    handles.remove(loaded.handle)
    for function in loaded.functions.values():
        handles.remove(function.handle)
        interposer.rt.fast.kernel_gone(function.handle, interposer.rt.devices)


def function(loaded: DriverModule, name: str, what: str) -> DriverFunction:
    """The module's CUfunction for kernel `name` (the same handle each time)."""
    found = loaded.functions.get(name)
    if found is None:
        if name not in loaded.module.parsed.kernels():
            raise DriverError(CUresult.CUDA_ERROR_NOT_FOUND,
                            f"{what}: the module has no kernel {name!r} "
                            f"(it has: {', '.join(loaded.module.parsed.kernels())})")
        found = loaded.functions[name] = DriverFunction(handles.new_handle(), Kernel(loaded.module, name), loaded)
        handles.add(found)
    return found


def runtime_function(kernel: Kernel, device) -> DriverFunction:
    """The CUfunction of one of the program's own kernels on `device`: one
    handle per kernel and device, standing for the kernel <<<>>> launches."""
    module = _runtime_modules.get((kernel.module.key, device))
    if module is None:
        module = _runtime_modules[(kernel.module.key, device)] = DriverModule(handles.new_handle(), kernel.module,
                                                                             device)
        handles.add(module)
    fn = module.functions.get(kernel.name)
    if fn is None:
        fn = module.functions[kernel.name] = DriverFunction(handles.new_handle(), kernel, module)
        handles.add(fn)
    return fn


# ---------------------------------------------------------------- libraries


def load_library(image: bytes, what: str, jit_count: int = 0, jit_options=None, jit_values=None) -> DriverLibrary:
    """A new CUlibrary/cudaLibrary_t, loaded on the current device at once
    (so a bad image fails here).  Library options (whether the runtime may
    keep the caller's buffer) change nothing: the image is copied."""
    jit = JitOptions(interposer.ffi, interposer.lib, jit_count, jit_options, jit_values, what)
    loaded = load(image, what, jit)
    library = DriverLibrary(handles.new_handle(), loaded.module, {loaded.device: loaded})
    handles.add(library)
    return library


def unload_library(library: DriverLibrary) -> None:
    """The library's handles, its modules' and its kernels' are invalid from now on."""
    for loaded in library.modules.values():
        unload(loaded)
    for kernel in library.kernels.values():
        handles.remove(kernel.handle)
        interposer.rt.fast.kernel_gone(kernel.handle, interposer.rt.devices)  # launched by its handle
    handles.remove(library.handle)


def library_module(library: DriverLibrary, what: str, device=None) -> DriverModule:
    """The library's module on the current device (or on `device`), loaded on first need."""
    device = interposer.rt.device() if device is None else device
    loaded = library.modules.get(device)
    if loaded is None:
        loaded = library.modules[device] = load(library.module.image, what, device=device)
    return loaded


def library_kernel(library: DriverLibrary, name: str, what: str) -> DriverKernel:
    """The library's kernel `name` (the same handle each time)."""
    kernel = library.kernels.get(name)
    if kernel is None:
        if name not in library.module.parsed.kernels():
            raise DriverError(CUresult.CUDA_ERROR_NOT_FOUND, f"{what}: the library has no kernel {name!r}")
        kernel = library.kernels[name] = DriverKernel(handles.new_handle(), library, name)
        handles.add(kernel)
    return kernel


def kernel_function(kernel: DriverKernel, what: str, device=None) -> DriverFunction:
    """A library kernel's CUfunction on the current device (or on `device`)."""
    return function(library_module(kernel.library, what, device), kernel.name, what)


# ---------------------------------------------------------------- kernel handles


def function_of(handle: int, what: str, device=None) -> DriverFunction:
    """The CUfunction of kernel handle `handle` on the current device (or
    on `device`): a library's kernel, or one of the program's (its host stub)."""
    kernel = handles.find(handle, DriverKernel)
    if kernel is not None:
        return kernel_function(kernel, what, device)
    device = interposer.rt.device() if device is None else device
    return runtime_function(interposer.rt.kernels.kernel(handle), device)


def kernel_of(handle: int, what: str) -> Kernel:
    """The runtime Kernel a kernel handle names, on no device in particular
    (its name and parameter layout need none): a library's kernel, or one
    of the program's own (its host stub).  A handle that is neither is
    cudaErrorInvalidDeviceFunction (the driver's CUDA_ERROR_INVALID_HANDLE)."""
    kernel = handles.find(handle, DriverKernel)
    if kernel is not None:
        return Kernel(kernel.library.module, kernel.name)
    try:
        return interposer.rt.kernels.kernel(handle)
    except CudaError as exc:
        raise CudaError(exc.status, f"{what}: {exc.message}") from None


def kernel_on(func: int, what: str, device=None) -> Kernel:
    """The runtime Kernel a function pointer names on the current device (or
    on `device`): a host stub, or a library's kernel handle, which CUDA
    accepts wherever a function pointer is expected."""
    kernel = handles.find(func, DriverKernel)
    if kernel is not None:
        return kernel_function(kernel, what, device).kernel
    return interposer.rt.kernels.kernel(func)

