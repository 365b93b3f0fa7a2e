"""The runtime's library management and kernel handles: cudaLibraryLoadData,
cudaLibraryLoadFromFile, cudaLibraryUnload, cudaLibraryGetKernel,
cudaLibraryGetKernelCount, cudaLibraryEnumerateKernels,
cudaLibraryGetGlobal, cudaLibraryGetManaged, cudaLibraryGetUnifiedFunction,
cudaGetKernel, cudaKernelSetAttributeForDevice.

The runtime face of the driver's cuLibrary*/cuKernel*: a cudaLibrary_t is
a CUlibrary and a cudaKernel_t a CUkernel, the same objects
(client/driver/loading.py), so either API's functions take the other's
handles.  A library is loaded on the current device when it is loaded (a
bad image fails there) and on any other device when that device first
needs it.  A library's cudaKernel_t can be launched with cudaLaunchKernel
(and cudaLaunchKernelExC, cudaLaunchCooperativeKernel) as a function
pointer; after its first launch on a device, C records its launches there
as it does a host stub's.  A kernel of the program's own is its host stub
(cudaGetKernel gives the stub's address, as __cudaGetKernel does).

A library's __managed__ variable (cudaLibraryGetManaged, cuLibraryGetManaged)
is mirrored as the program's own __managed__ variables are
(client/memory/managed.py): the copy on the device the library was loaded
on first, with host memory holding its bytes at another address, which is
the pointer the program gets (kernels reach the variable by name).  No
device rcuda serves has unified function pointers
(CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS reads 0), so
cudaLibraryGetUnifiedFunction finds none, as CUDA documents for such a
system.
"""
from __future__ import annotations

from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..driver import loading
from ..driver.handles import DriverLibrary, handles
from ..interposer import address, out_pointer
from .core import SUCCESS, cuda
from .memory import variable_address
from .queries import FUNC_ATTRIBUTES


def _library(library, what: str) -> DriverLibrary:
    found = handles.find(address(library), DriverLibrary)
    if found is None:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                        f"{what}: {address(library):#x} is not a loaded cudaLibrary_t")
    return found


def _name(name, what: str) -> str:
    return interposer.ffi.string(out_pointer(name, f"{what}: name")).decode(errors="replace")


def _give(out, what: str, handle: int, c_type: str) -> int:
    out_pointer(out, what)[0] = interposer.ffi.cast(c_type, handle)
    return SUCCESS


# ---------------------------------------------------------------- libraries


@cuda()
def cudaLibraryLoadData(library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                        libraryOptionValues, numLibraryOptions):
    """Library options change nothing: the image is copied at once."""
    out_pointer(library, "library")
    image = loading.read_image(code, "cudaLibraryLoadData")
    created = loading.load_library(image, "cudaLibraryLoadData", numJitOptions, jitOptions, jitOptionsValues)
    return _give(library, "library", created.handle, "cudaLibrary_t")


@cuda()
def cudaLibraryLoadFromFile(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                            libraryOptionValues, numLibraryOptions):
    out_pointer(library, "library")
    image = loading.read_file(fileName, "cudaLibraryLoadFromFile")
    created = loading.load_library(image, "cudaLibraryLoadFromFile", numJitOptions, jitOptions, jitOptionsValues)
    return _give(library, "library", created.handle, "cudaLibrary_t")


@cuda()
def cudaLibraryUnload(library):
    """The library's handles and its kernels' are invalid from now on
    (cudaErrorInvalidResourceHandle); the server keeps the image."""
    loading.unload_library(_library(library, "cudaLibraryUnload"))
    return SUCCESS


@cuda()
def cudaLibraryGetKernel(pKernel, library, name):
    out_pointer(pKernel, "pKernel")
    found = _library(library, "cudaLibraryGetKernel")
    kernel = loading.library_kernel(found, _name(name, "cudaLibraryGetKernel"), "cudaLibraryGetKernel")
    return _give(pKernel, "pKernel", kernel.handle, "cudaKernel_t")


@cuda()
def cudaLibraryGetKernelCount(count, lib):
    out_pointer(count, "count")
    count[0] = len(_library(lib, "cudaLibraryGetKernelCount").module.parsed.kernels())
    return SUCCESS


@cuda()
def cudaLibraryEnumerateKernels(kernels, numKernels, lib):
    """The first `numKernels` kernels, in the image's order; the handles
    cudaLibraryGetKernel gives for the same names."""
    out_pointer(kernels, "kernels")
    found = _library(lib, "cudaLibraryEnumerateKernels")
    for i, name in enumerate(list(found.module.parsed.kernels())[:numKernels]):
        kernels[i] = interposer.ffi.cast("cudaKernel_t",
                                         loading.library_kernel(found, name, "cudaLibraryEnumerateKernels").handle)
    return SUCCESS


@cuda()
def cudaLibraryGetGlobal(dptr, bytes, library, name):  # noqa: A002 - the header's name
    """The variable on the current device (the library is loaded there
    first if it was not)."""
    what = "cudaLibraryGetGlobal"
    ffi = interposer.ffi
    if dptr == ffi.NULL and bytes == ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: dptr and bytes are both NULL")
    found, name = _library(library, what), _name(name, what)
    if name not in found.module.parsed.variables():
        raise DriverError(CUresult.CUDA_ERROR_NOT_FOUND, f"{what}: the library has no variable {name!r}")
    loaded = loading.library_module(found, what)
    ptr, size = variable_address(loaded.module, name, loaded.device)
    if dptr != ffi.NULL:
        dptr[0] = ffi.cast("void *", ptr)
    if bytes != ffi.NULL:
        bytes[0] = size
    return SUCCESS


def managed_variable(library: DriverLibrary, name: str, what: str) -> tuple[int, int]:
    """(host address, size) of the library's __managed__ variable `name`,
    on the device it was first loaded on; cudaErrorSymbolNotFound
    (CUDA_ERROR_NOT_FOUND) when it has no such managed variable."""
    variable = library.module.parsed.variables().get(name)
    if variable is None or not variable.managed:
        raise CudaError(cudaError.cudaErrorSymbolNotFound,
                        f"{what}: the library has no __managed__ variable {name!r}"
                        + (" (it is a __device__ one: cudaLibraryGetGlobal)" if variable is not None else ""))
    device = next(iter(library.modules))  # loaded there by cudaLibraryLoad*
    return interposer.rt.managed.loaded_variable(interposer.rt, device, library.module, name)


@cuda()
def cudaLibraryGetManaged(dptr, bytes, library, name):  # noqa: A002 - the header's name
    """One of dptr and bytes may be NULL, not both."""
    what = "cudaLibraryGetManaged"
    ffi = interposer.ffi
    if dptr == ffi.NULL and bytes == ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: dptr and bytes are both NULL")
    ptr, size = managed_variable(_library(library, what), _name(name, what), what)
    if dptr != ffi.NULL:
        dptr[0] = ffi.cast("void *", ptr)
    if bytes != ffi.NULL:
        bytes[0] = size
    return SUCCESS


@cuda()
def cudaLibraryGetUnifiedFunction(fptr, library, symbol):
    """None is found (cudaErrorSymbolNotFound, the driver's
    CUDA_ERROR_NOT_FOUND), as CUDA answers on a system without unified
    function pointers."""
    what = "cudaLibraryGetUnifiedFunction"
    out_pointer(fptr, "fptr")
    _library(library, what)
    raise CudaError(cudaError.cudaErrorSymbolNotFound, f"{what}: no unified function {_name(symbol, what)!r}: no "
                                                       f"device rcuda serves has unified function pointers")


# ---------------------------------------------------------------- kernel handles


@cuda()
def cudaGetKernel(kernelPtr, entryFuncAddr):
    """The cudaKernel_t of one of the program's kernels: its host stub's
    address (as __cudaGetKernel answers), which the driver's cuKernel*
    functions take too."""
    out_pointer(kernelPtr, "kernelPtr")
    interposer.rt.kernels.kernel(address(entryFuncAddr))  # cudaErrorInvalidDeviceFunction if it is none
    return _give(kernelPtr, "kernelPtr", address(entryFuncAddr), "cudaKernel_t")


@cuda()
def cudaKernelSetAttributeForDevice(kernel, attr, value, device):
    """As cudaFuncSetAttribute on `device`: the kernel's attribute there,
    whichever API launches it (a library's kernel is loaded there first)."""
    what = "cudaKernelSetAttributeForDevice"
    name = FUNC_ATTRIBUTES.get(attr)
    if name is None or name == "cudaFuncAttributeMax":
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: cudaFuncAttribute {attr}")
    on = interposer.rt.device(device)
    on.set_function_attribute(loading.kernel_on(address(kernel), what, on), name, value)
    return SUCCESS
