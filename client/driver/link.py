"""Driver API linking: cuLinkCreate, cuLinkAddData, cuLinkAddFile,
cuLinkComplete, cuLinkDestroy.

The inputs (fatbinaries, cubins, PTX) are collected on the client;
cuLinkComplete sends them to the current context's server (the `link` op),
whose backend links them: the cupy backend with the driver's own cuLink*
(a cubin comes back), the sim by combining them into one fatbinary whose
kernels plugins find by name, after checking the PTX (server/backends/
sim_jit.py).  So a bad input is reported by cuLinkComplete, with the log in
CU_JIT_ERROR_LOG_BUFFER, where a GPU's linker may already refuse it in
cuLinkAddData.  The image stays valid until cuLinkDestroy, as CUDA's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError

from .. import interposer
from ..interposer import address, out_pointer
from .registry import SUCCESS, driver, require_initialized
from .loading import read_file
from .handles import handles
from .jit_options import JitOptions

#: CUjitInputType values rcuda links; object files, libraries and NVVM IR are not supported.
LINKABLE = ("CU_JIT_INPUT_CUBIN", "CU_JIT_INPUT_PTX", "CU_JIT_INPUT_FATBINARY")


@dataclass(eq=False)
class LinkState:
    handle: int
    jit: JitOptions
    inputs: list = field(default_factory=list)  # (name, image bytes)
    image: object = None  # the linked image (a cffi buffer the program reads), after cuLinkComplete


def _state(state, what: str) -> LinkState:
    require_initialized()
    return handles.get(address(state), LinkState, what)


@driver("cuLinkCreate_v2", "cuLinkCreate")
def cuLinkCreate_v2(numOptions, options, optionValues, stateOut):
    """The options' buffers must stay valid until cuLinkDestroy, as in CUDA."""
    require_initialized()
    out_pointer(stateOut, "stateOut")
    state = LinkState(handles.new_handle(), JitOptions(interposer.ffi, interposer.lib, numOptions, options, optionValues,
                                                       "cuLinkCreate"))
    handles.add(state)
    stateOut[0] = interposer.ffi.cast("CUlinkState", state.handle)
    return SUCCESS


def _add(state: LinkState, kind: int, data: bytes, name: str, what: str) -> None:
    names = {getattr(interposer.lib, input_type): input_type for input_type in LINKABLE}
    if kind not in names:
        raise DriverError(CUresult.CUDA_ERROR_NOT_SUPPORTED, f"{what}: input type {kind} ({name}) is not one "
                                                             f"rcuda links ({', '.join(LINKABLE)})")
    if not data:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE, f"{what}: {name} is empty")
    state.inputs.append((name, data))


@driver("cuLinkAddData_v2", "cuLinkAddData")
def cuLinkAddData_v2(state, type, data, size, name, numOptions, options, optionValues):  # noqa: A002
    """Per-input options tune the compiler: accepted, not forwarded."""
    found = _state(state, "cuLinkAddData")
    out_pointer(data, "data")
    label = interposer.ffi.string(name).decode(errors="replace") if name != interposer.ffi.NULL else f"input {len(found.inputs)}"
    _add(found, type, bytes(interposer.ffi.buffer(data, size)), label, "cuLinkAddData")
    return SUCCESS


@driver("cuLinkAddFile_v2", "cuLinkAddFile")
def cuLinkAddFile_v2(state, type, path, numOptions, options, optionValues):  # noqa: A002
    found = _state(state, "cuLinkAddFile")
    data = read_file(path, "cuLinkAddFile")
    _add(found, type, data, interposer.ffi.string(path).decode(errors="replace"), "cuLinkAddFile")
    return SUCCESS


@driver()
def cuLinkComplete(state, cubinOut, sizeOut):
    found = _state(state, "cuLinkComplete")
    out_pointer(cubinOut, "cubinOut")
    out_pointer(sizeOut, "sizeOut")
    if not found.inputs:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE, "cuLinkComplete: nothing was added to link")
    try:
        image, info = interposer.rt.device().link_images(found.inputs)
    except CudaError as exc:
        found.jit.report(error=exc.message)
        raise
    found.jit.report(info=info)
    found.image = interposer.ffi.new("char[]", image)
    cubinOut[0] = found.image
    sizeOut[0] = len(image)
    return SUCCESS


@driver()
def cuLinkDestroy(state):
    handles.remove(_state(state, "cuLinkDestroy").handle)
    return SUCCESS
