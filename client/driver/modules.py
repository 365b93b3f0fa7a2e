"""Driver API modules and libraries: cuModuleLoad*, cuModuleGetFunction,
cuModuleGetGlobal, cuLibrary*, cuKernelGetFunction.  The loading itself is
client/driver/loading.py's, which the runtime's cudaLibrary* share.

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

from rcuda import fatbin
from rcuda.driver_errors import CUresult, DriverError

from .. import interposer
from ..interposer import address, out_pointer
from .registry import SUCCESS, driver, from_runtime, require_initialized
from ..runtime import library_management as runtime_libraries
from ..runtime.memory import variable_address
from .handles import DriverLibrary, DriverModule, handles
from .jit_options import JitOptions
from . import loading
from .loading import function, library_module, read_file, read_image, unload


def load(image: bytes, what: str, jit: JitOptions | None = None, device=None) -> DriverModule:
    """A new CUmodule: `image` loaded into the current context (or on `device`)."""
    require_initialized()
    return loading.load(image, what, jit, device)


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


@driver()
def cuModuleUnload(hmod):
    unload(_module(hmod, "cuModuleUnload"))
    return SUCCESS


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


def _load_library(library, image: bytes, numJitOptions, jitOptions, jitOptionsValues, what: str):
    """cuLibraryLoadData/FromFile (client/driver/loading.py `load_library`)."""
    out_pointer(library, "library")
    require_initialized()
    created = loading.load_library(image, what, numJitOptions, jitOptions, jitOptionsValues)
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
    loading.unload_library(_library(library, "cuLibraryUnload"))
    return SUCCESS


@driver()
def cuLibraryGetKernel(pKernel, library, name):
    out_pointer(pKernel, "pKernel")
    kernel = loading.library_kernel(_library(library, "cuLibraryGetKernel"), _name(name), "cuLibraryGetKernel")
    return _give(pKernel, "pKernel", kernel.handle, "CUkernel")


@driver()
def cuLibraryGetKernelCount(count, lib):
    require_initialized()
    return from_runtime(runtime_libraries.cudaLibraryGetKernelCount(count, lib))


@driver()
def cuLibraryEnumerateKernels(kernels, numKernels, lib):
    """The first `numKernels` kernels in the image's order: the handles
    cuLibraryGetKernel gives for the same names."""
    require_initialized()
    return from_runtime(runtime_libraries.cudaLibraryEnumerateKernels(kernels, numKernels, lib))


@driver()
def cuLibraryGetModule(pMod, library):
    out_pointer(pMod, "pMod")
    loaded = library_module(_library(library, "cuLibraryGetModule"), "cuLibraryGetModule")
    return _give(pMod, "pMod", loaded.handle, "CUmodule")


@driver()
def cuLibraryGetGlobal(dptr, bytes, library, name):  # noqa: A002 - cuda.h's name
    loaded = library_module(_library(library, "cuLibraryGetGlobal"), "cuLibraryGetGlobal")
    return _global(dptr, bytes, loaded, name, "cuLibraryGetGlobal")


@driver()
def cuLibraryGetManaged(dptr, bytes, library, name):  # noqa: A002 - cuda.h's name
    """cudaLibraryGetManaged (a CUdeviceptr is the runtime's pointer): the
    variable mirrored on the device the library was first loaded on, its
    host copy the pointer given.  One of dptr and bytes may be NULL, not both."""
    require_initialized()
    return from_runtime(runtime_libraries.cudaLibraryGetManaged(interposer.ffi.cast("void **", dptr), bytes, library,
                                                                name))


@driver()
def cuLibraryGetUnifiedFunction(fptr, library, symbol):
    """cudaLibraryGetUnifiedFunction: CUDA_ERROR_NOT_FOUND, as no device
    rcuda serves has unified function pointers
    (CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS 0)."""
    require_initialized()
    return from_runtime(runtime_libraries.cudaLibraryGetUnifiedFunction(fptr, library, symbol))


#: CUmoduleLoadingMode: CU_MODULE_LAZY_LOADING.
LAZY_LOADING = 0x2


@driver()
def cuModuleGetLoadingMode(mode):
    """Lazy, whatever CUDA_MODULE_LOADING says: rcuda sends a program's
    images to a GPU at their first use and registers each function at its
    first launch or query (cuFuncIsLoaded)."""
    require_initialized()
    out_pointer(mode, "mode")[0] = LAZY_LOADING
    return SUCCESS


@driver()
def cuKernelGetFunction(pFunc, kernel):
    out_pointer(pFunc, "pFunc")
    require_initialized()
    found = loading.function_of(address(kernel), "cuKernelGetFunction")
    return _give(pFunc, "pFunc", found.handle, "CUfunction")
