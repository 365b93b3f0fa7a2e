"""CUDA driver API: the pre-CUDA-4 launch API (cuFuncSetBlockShape,
cuFuncSetSharedSize, cuParamSetSize, cuParamSeti/f/v, cuParamSetTexRef,
cuLaunch, cuLaunchGrid, cuLaunchGridAsync).

The block shape, dynamic shared memory and parameter bytes a program sets
are kept on the CUfunction (client/driver/handles.py DriverFunction
`legacy`), as the driver keeps them; cuLaunch* launch with them through
the runtime's path (client/runtime/core.py `launch_kernel`), as
cuLaunchKernel does: the same checks, function ids and `launch` messages,
so legacy and newer launches into one stream keep their order.  The
parameter bytes are the packed block, as `extra`'s
CU_LAUNCH_PARAM_BUFFER_POINTER gives it: cuParamSet* write at byte offsets
the program computes, cuParamSetSize says how many of them the launch
passes, which must be the kernel's parameter block size
(CUDA_ERROR_INVALID_VALUE otherwise).

cuParamSetTexRef names a texture reference of the function's module, which
the kernel reads by name anyway (client/driver/texture_references.py): it
is checked and changes nothing.  CUDA says a cuLaunchKernel makes this
state undefined; here it stays as it was.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from rcuda.errors import CudaError, cudaError
from rcuda.launch_rules import MAX_PARAM_BYTES

from .. import interposer
from ..runtime.core import launch_kernel
from .handles import DriverFunction
from .launch import _launchable
from .registry import SUCCESS, driver, require_initialized
from .texture_references import texture_reference

#: cuParamSetTexRef's only texture unit (cuda.h's CU_PARAM_TR_DEFAULT).
CU_PARAM_TR_DEFAULT = -1


@dataclass
class LegacyLaunch:
    """What cuFuncSetBlockShape, cuFuncSetSharedSize and cuParamSet* set."""

    block: tuple | None = None  # None until cuFuncSetBlockShape
    shared_mem: int = 0
    params: bytearray = field(default_factory=bytearray)  # the bytes cuParamSet* wrote, zeros between
    size: int | None = None  # cuParamSetSize's; None until called


def _invalid(call: str, why: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {why}")


def _function(hfunc, call: str) -> DriverFunction:
    """The CUfunction (or CUkernel, as a CUfunction) in the current context."""
    require_initialized()
    return _launchable(hfunc, call)


def _state(function: DriverFunction) -> LegacyLaunch:
    if function.legacy is None:
        function.legacy = LegacyLaunch()
    return function.legacy


@driver()
def cuFuncSetBlockShape(hfunc, x, y, z):
    """Checked against the device and the kernel at the launch, as a
    launch's configuration is; a side below 1 is CUDA_ERROR_INVALID_VALUE now."""
    call = "cuFuncSetBlockShape"
    function = _function(hfunc, call)
    if min(x, y, z) < 1:
        raise _invalid(call, f"a block of {x} x {y} x {z} threads")
    _state(function).block = (x, y, z)
    return SUCCESS


@driver()
def cuFuncSetSharedSize(hfunc, bytes):  # noqa: A002 - cuda.h's name
    """Dynamic shared memory per block, checked at the launch."""
    _state(_function(hfunc, "cuFuncSetSharedSize")).shared_mem = bytes
    return SUCCESS


@driver()
def cuParamSetSize(hfunc, numbytes):
    """How many parameter bytes the launch passes: at most CUDA's 32,764."""
    call = "cuParamSetSize"
    function = _function(hfunc, call)
    if numbytes > MAX_PARAM_BYTES:
        raise _invalid(call, f"{numbytes} bytes of parameters, more than CUDA's {MAX_PARAM_BYTES}")
    _state(function).size = numbytes
    return SUCCESS


def _write(hfunc, offset: int, data: bytes, call: str):
    function = _function(hfunc, call)
    if offset < 0 or offset + len(data) > MAX_PARAM_BYTES:
        raise _invalid(call, f"{len(data)} bytes at offset {offset}: parameters are {MAX_PARAM_BYTES} bytes at most")
    params = _state(function).params
    if len(params) < offset + len(data):
        params.extend(bytes(offset + len(data) - len(params)))
    params[offset:offset + len(data)] = data
    return SUCCESS


@driver()
def cuParamSeti(hfunc, offset, value):
    return _write(hfunc, offset, struct.pack("<I", value & 0xFFFF_FFFF), "cuParamSeti")


@driver()
def cuParamSetf(hfunc, offset, value):
    return _write(hfunc, offset, struct.pack("<f", value), "cuParamSetf")


@driver()
def cuParamSetv(hfunc, offset, ptr, numbytes):
    call = "cuParamSetv"
    if numbytes and ptr == interposer.ffi.NULL:
        raise _invalid(call, f"ptr is NULL, numbytes {numbytes}")
    if numbytes > MAX_PARAM_BYTES:
        raise _invalid(call, f"{numbytes} bytes: parameters are {MAX_PARAM_BYTES} bytes at most")
    data = bytes(interposer.ffi.buffer(ptr, numbytes)) if numbytes else b""
    return _write(hfunc, offset, data, call)


@driver()
def cuParamSetTexRef(hfunc, texunit, hTexRef):
    """texunit must be CU_PARAM_TR_DEFAULT and the reference one of the
    function's module (cuModuleGetTexRef's), which its kernels read anyway."""
    call = "cuParamSetTexRef"
    function = _function(hfunc, call)
    if texunit != CU_PARAM_TR_DEFAULT:
        raise _invalid(call, f"texunit {texunit} (must be CU_PARAM_TR_DEFAULT)")
    ref = texture_reference(hTexRef, call)
    if ref.module is None:
        raise _invalid(call, "the texture reference was made with cuTexRefCreate: it must come from "
                             "cuModuleGetTexRef")
    if ref.module.module.key != function.module.module.key:
        raise _invalid(call, f"texture reference {ref.name} belongs to another module than {function.kernel.name}")
    return SUCCESS


# ------------------------------------------------------------------ launches


def _launch(f, grid: tuple, stream, call: str):
    function = _function(f, call)
    state = function.legacy
    if state is None or state.block is None:
        raise _invalid(call, f"no block shape for {function.kernel.name}: call cuFuncSetBlockShape first")
    if min(grid) < 1:
        raise _invalid(call, f"a grid of {grid[0]} x {grid[1]} blocks")
    size = state.size or 0
    block = bytes(state.params[:size]).ljust(size, b"\0")

    def packed(params):
        if size != params.buffer_size:
            raise _invalid(call, f"cuParamSetSize gave {size} bytes of parameters, {function.kernel.name} takes "
                                 f"{params.buffer_size}")
        return block
    launch_kernel(function.kernel, grid, state.block, state.shared_mem, stream, packed, False, False)
    return SUCCESS


@driver()
def cuLaunch(f):
    """A grid of one block, in the NULL stream."""
    return _launch(f, (1, 1, 1), 0, "cuLaunch")


@driver()
def cuLaunchGrid(f, grid_width, grid_height):
    """A grid of grid_width x grid_height blocks, in the NULL stream."""
    return _launch(f, (grid_width, grid_height, 1), 0, "cuLaunchGrid")


@driver()
def cuLaunchGridAsync(f, grid_width, grid_height, hStream):
    return _launch(f, (grid_width, grid_height, 1), hStream, "cuLaunchGridAsync")
