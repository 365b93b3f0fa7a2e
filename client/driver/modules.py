"""Driver API modules and libraries: cuModuleLoad*, cuModuleGetFunction,
cuModuleGetGlobal, cuLibrary*, cuKernelGetFunction.

An image is a fatbinary, a cubin or PTX text (rcuda/fatbin.py reads kernel
names and parameter layouts from any of them).  Loading sends it to the
current context's GPU at once (the `module` op), so a bad image or bad PTX
fails here, as on a GPU, with the JIT's log in CU_JIT_ERROR_LOG_BUFFER.  A
module is a runtime `Module`, a CUfunction a runtime `Kernel`
(client/driver/handles.py): launches take the runtime's path.

A library (cuLibraryLoadData) is context-independent: its image is loaded
into a context the first time that context needs it (cuLibraryGetModule,
cuKernelGetFunction, a launch of its CUkernel).  Unloading makes the
handles invalid; the server keeps the image for the session (the runtime
never unloads one either).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rcuda import fatbin
from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError

from .. import interposer
from ..interposer import address, out_pointer
from .registry import SUCCESS, driver, require_initialized
from ..runtime.memory import variable_address
from .handles import DriverFunction, DriverModule, handles
from .jit_options import JitOptions
from ..modules import Kernel, Module

#: No module image is this big: a size read from a corrupt header is refused.
MAX_IMAGE_BYTES = 1 << 31


@dataclass(eq=False)
class DriverLibrary:
    handle: int
    module: Module                               # the image, shared by its contexts
    modules: dict = field(default_factory=dict)  # RemoteDevice -> DriverModule
    kernels: dict = field(default_factory=dict)  # name -> DriverKernel


@dataclass(eq=False)
class DriverKernel:
    """A CUkernel: a library's kernel, in whichever context launches it."""

    handle: int
    library: DriverLibrary
    name: str


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


def load(image: bytes, what: str, jit: JitOptions | None = None, device=None) -> DriverModule:
    """A new CUmodule: `image` loaded into the current context (or on `device`)."""
    require_initialized()
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


def _give(out, what: str, handle: int, c_type: str) -> int:
    out_pointer(out, what)[0] = interposer.ffi.cast(c_type, handle)
    return SUCCESS


# ---------------------------------------------------------------- modules


@driver()
def cuModuleLoad(module, fname):
    out_pointer(module, "module")
    return _give(module, "module", load(read_file(fname, "cuModuleLoad"), "cuModuleLoad").handle, "CUmodule")


@driver()
def cuModuleLoadData(module, image):
    out_pointer(module, "module")
    return _give(module, "module", load(read_image(image, "cuModuleLoadData"), "cuModuleLoadData").handle,
                 "CUmodule")


@driver()
def cuModuleLoadDataEx(module, image, numOptions, options, optionValues):
    out_pointer(module, "module")
    jit = JitOptions(interposer.ffi, interposer.lib, numOptions, options, optionValues, "cuModuleLoadDataEx")
    loaded = load(read_image(image, "cuModuleLoadDataEx"), "cuModuleLoadDataEx", jit)
    return _give(module, "module", loaded.handle, "CUmodule")


@driver()
def cuModuleLoadFatBinary(module, fatCubin):
    out_pointer(module, "module")
    image = read_image(fatCubin, "cuModuleLoadFatBinary")
    if fatbin.image_kind(image[:4]) != "fatbin":
        raise DriverError(CUresult.CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadFatBinary: not a fatbinary")
    return _give(module, "module", load(image, "cuModuleLoadFatBinary").handle, "CUmodule")


def _module(hmod, what: str) -> DriverModule:
    require_initialized()
    return handles.get(address(hmod), DriverModule, what)


def unload(loaded: DriverModule) -> None:
    """The module's handle and its functions' are invalid from now on."""
    loaded.unloaded = True
    handles.remove(loaded.handle)
    for function in loaded.functions.values():
        handles.remove(function.handle)
        interposer.rt.fast.kernel_gone(function.handle, interposer.rt.devices)


@driver()
def cuModuleUnload(hmod):
    unload(_module(hmod, "cuModuleUnload"))
    return SUCCESS


def function(loaded: DriverModule, name: str, what: str) -> DriverFunction:
    """The module's CUfunction for kernel `name` (the same handle each time)."""
    found = loaded.functions.get(name)
    if found is None:
        if name not in loaded.module.parsed.kernels():
            raise DriverError(CUresult.CUDA_ERROR_NOT_FOUND, f"{what}: the module has no kernel {name!r} "
                                                             f"(it has: {', '.join(loaded.module.parsed.kernels())})")
        found = loaded.functions[name] = DriverFunction(handles.new_handle(), Kernel(loaded.module, name), loaded)
        handles.add(found)
    return found


def _name(name) -> str:
    return interposer.ffi.string(out_pointer(name, "name")).decode(errors="replace")


@driver()
def cuModuleGetFunction(hfunc, hmod, name):
    out_pointer(hfunc, "hfunc")
    found = function(_module(hmod, "cuModuleGetFunction"), _name(name), "cuModuleGetFunction")
    return _give(hfunc, "hfunc", found.handle, "CUfunction")


@driver()
def cuModuleGetFunctionCount(count, mod):
    out_pointer(count, "count")[0] = len(_module(mod, "cuModuleGetFunctionCount").module.parsed.kernels())
    return SUCCESS


@driver()
def cuModuleEnumerateFunctions(functions, numFunctions, mod):
    loaded = _module(mod, "cuModuleEnumerateFunctions")
    out_pointer(functions, "functions")
    for i, name in enumerate(list(loaded.module.parsed.kernels())[:numFunctions]):
        functions[i] = interposer.ffi.cast("CUfunction", function(loaded, name, "cuModuleEnumerateFunctions").handle)
    return SUCCESS


def _global(dptr, numbytes, loaded: DriverModule, name, what: str):
    """cuModuleGetGlobal/cuLibraryGetGlobal: a variable's address and size
    (either output may be NULL)."""
    name = _name(name)
    if name not in loaded.module.parsed.variables():
        raise DriverError(CUresult.CUDA_ERROR_NOT_FOUND, f"{what}: the module has no variable {name!r}")
    ptr, size = variable_address(loaded.module, name, loaded.device)
    if dptr != interposer.ffi.NULL:
        dptr[0] = ptr
    if numbytes != interposer.ffi.NULL:
        numbytes[0] = size
    return SUCCESS


@driver()
def cuModuleGetGlobal_v2(dptr, bytes, hmod, name):  # noqa: A002 - cuda.h's name
    return _global(dptr, bytes, _module(hmod, "cuModuleGetGlobal"), name, "cuModuleGetGlobal")


# ---------------------------------------------------------------- libraries


def _library(library, what: str) -> DriverLibrary:
    require_initialized()
    return handles.get(address(library), DriverLibrary, what)


def library_module(library: DriverLibrary, what: str, device=None) -> DriverModule:
    """The library's module in the current context (or on `device`), loaded on first need."""
    device = interposer.rt.device() if device is None else device
    loaded = library.modules.get(device)
    if loaded is None:
        loaded = library.modules[device] = load(library.module.image, what, device=device)
    return loaded


def _load_library(library, image: bytes, numJitOptions, jitOptions, jitOptionsValues, what: str):
    """cuLibraryLoadData/FromFile.  Library options (the runtime's own
    tables, keeping the caller's buffer) change nothing here."""
    out_pointer(library, "library")
    jit = JitOptions(interposer.ffi, interposer.lib, numJitOptions, jitOptions, jitOptionsValues, what)
    loaded = load(image, what, jit)
    created = DriverLibrary(handles.new_handle(), loaded.module, {loaded.device: loaded})
    handles.add(created)
    return _give(library, "library", created.handle, "CUlibrary")


@driver()
def cuLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                      libraryOptionValues, numLibraryOptions):
    return _load_library(library, read_image(code, "cuLibraryLoadData"), numJitOptions, jitOptions,
                         jitOptionsValues, "cuLibraryLoadData")


@driver()
def cuLibraryLoadFromFile(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                          libraryOptionValues, numLibraryOptions):
    return _load_library(library, read_file(fileName, "cuLibraryLoadFromFile"), numJitOptions, jitOptions,
                         jitOptionsValues, "cuLibraryLoadFromFile")


@driver()
def cuLibraryUnload(library):
    found = _library(library, "cuLibraryUnload")
    for loaded in found.modules.values():
        unload(loaded)
    for kernel in found.kernels.values():
        handles.remove(kernel.handle)
        interposer.rt.fast.kernel_gone(kernel.handle, interposer.rt.devices)  # launched as a CUfunction
    handles.remove(found.handle)
    return SUCCESS


@driver()
def cuLibraryGetKernel(pKernel, library, name):
    out_pointer(pKernel, "pKernel")
    found, name = _library(library, "cuLibraryGetKernel"), _name(name)
    kernel = found.kernels.get(name)
    if kernel is None:
        if name not in found.module.parsed.kernels():
            raise DriverError(CUresult.CUDA_ERROR_NOT_FOUND, f"cuLibraryGetKernel: the library has no kernel "
                                                             f"{name!r}")
        kernel = found.kernels[name] = DriverKernel(handles.new_handle(), found, name)
        handles.add(kernel)
    return _give(pKernel, "pKernel", kernel.handle, "CUkernel")


@driver()
def cuLibraryGetModule(pMod, library):
    out_pointer(pMod, "pMod")
    loaded = library_module(_library(library, "cuLibraryGetModule"), "cuLibraryGetModule")
    return _give(pMod, "pMod", loaded.handle, "CUmodule")


@driver()
def cuLibraryGetGlobal(dptr, bytes, library, name):  # noqa: A002 - cuda.h's name
    loaded = library_module(_library(library, "cuLibraryGetGlobal"), "cuLibraryGetGlobal")
    return _global(dptr, bytes, loaded, name, "cuLibraryGetGlobal")


def kernel_function(kernel: DriverKernel, what: str, device=None) -> DriverFunction:
    """A CUkernel's CUfunction in the current context (or on `device`)."""
    return function(library_module(kernel.library, what, device), kernel.name, what)


@driver()
def cuKernelGetFunction(pFunc, kernel):
    out_pointer(pFunc, "pFunc")
    require_initialized()
    found = kernel_function(handles.get(address(kernel), DriverKernel, "cuKernelGetFunction"), "cuKernelGetFunction")
    return _give(pFunc, "pFunc", found.handle, "CUfunction")
