"""Driver API launches: cuLaunchKernel, cuLaunchKernelEx,
cuLaunchCooperativeKernel (and their _ptsz variants).

They take the runtime's launch path (client/runtime/core.py `launch_kernel`): the
same checks, function ids and `launch` messages, so driver and runtime
launches into one stream keep their order.  The function is a CUfunction
of the current context, or a CUkernel (a library's kernel or cudaGetKernel's,
launched in the current context).  Parameters come as `kernelParams` (a pointer per
parameter, like the runtime's `void **args`) or as `extra`
(CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE: the packed block, whose size must be
the kernel's).  Driver launches go through Python, not the C fast path.
"""
from __future__ import annotations

from rcuda.driver_errors import CUresult, DriverError
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..runtime import core as runtime_core
from ..interposer import address
from ..runtime.core import launch_kernel
from .registry import SUCCESS, driver, require_initialized
from .loading import function_of
from .handles import DriverFunction, handles

# cuda.h's CU_LAUNCH_PARAM_* markers in `extra` ((void *) constants).
CU_LAUNCH_PARAM_END, CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE = 0, 1, 2
#: Entries of `extra` read at most: a list without its END is refused, not run past.
MAX_EXTRA_ENTRIES = 16


def _launchable(f, what: str) -> DriverFunction:
    """The CUfunction `f` names, in the current context (a CUkernel, a
    library's or cudaGetKernel's: its function there)."""
    handle = address(f)
    function = handles.find(handle, DriverFunction)
    if function is None:
        return function_of(handle, what)
    device = interposer.rt.device()
    if function.module.device is not device:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_HANDLE,
                          f"{what}: the function {function.kernel.name} belongs to the context of "
                          f"{function.module.device.label}, the current context is {device.label}'s")
    return function


def _extra_buffer(extra, what: str) -> bytes:
    """The parameter block `extra` points at."""
    ffi = interposer.ffi
    pointer = size = None
    for i in range(0, MAX_EXTRA_ENTRIES, 2):
        key = int(ffi.cast("uintptr_t", extra[i]))
        if key == CU_LAUNCH_PARAM_END:
            break
        if key == CU_LAUNCH_PARAM_BUFFER_POINTER:
            pointer = extra[i + 1]
        elif key == CU_LAUNCH_PARAM_BUFFER_SIZE:
            size = ffi.cast("size_t *", extra[i + 1])[0] if extra[i + 1] != ffi.NULL else None
        else:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: unknown entry {key:#x} in extra")
    else:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: extra has no CU_LAUNCH_PARAM_END within "
                                                         f"{MAX_EXTRA_ENTRIES} entries")
    if pointer is None or pointer == ffi.NULL or size is None:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: extra needs CU_LAUNCH_PARAM_BUFFER_POINTER "
                                                         f"and CU_LAUNCH_PARAM_BUFFER_SIZE")
    return bytes(ffi.buffer(pointer, size))


def _packer(function: DriverFunction, kernelParams, extra, what: str):
    """pack(KernelParams) -> the parameter buffer, from one of the two styles."""
    ffi, name = interposer.ffi, function.kernel.name
    if kernelParams != ffi.NULL and extra != ffi.NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: both kernelParams and extra for {name}")
    if extra != ffi.NULL:
        block = _extra_buffer(extra, what)

        def packed(params):
            if len(block) != params.buffer_size:
                raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: extra holds {len(block)} bytes of "
                                                                 f"parameters, {name} takes {params.buffer_size}")
            return block
        return packed

    def pack(params):
        if kernelParams == ffi.NULL and params.sizes:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: {name} takes {len(params.sizes)} "
                                                             f"parameters, kernelParams and extra are NULL")
        return params.pack(ffi, kernelParams)
    return pack


def _launch(f, grid, block, shared_mem: int, stream, kernelParams, extra, per_thread: bool, cooperative: bool,
            what: str, cluster=None):
    require_initialized()
    function = _launchable(f, what)
    device, fn = launch_kernel(function.kernel, grid, block, shared_mem, stream,
                               _packer(function, kernelParams, extra, what), per_thread, cooperative, cluster)
    # C records the next plain cuLaunchKernel of `f` on this device itself
    # (native/launch_fast_path.c, rcuda_c_cuLaunchKernel), keyed by the
    # handle; not a kernel with a cluster shape of its own (its every launch
    # is a cluster launch, made here).
    device.fast_path_ready(address(f), function.kernel, fn)
    return SUCCESS


@driver(stream_variants=True)
def cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                   kernelParams, extra, per_thread=False):
    return _launch(f, (gridDimX, gridDimY, gridDimZ), (blockDimX, blockDimY, blockDimZ), sharedMemBytes, hStream,
                   kernelParams, extra, per_thread, False, "cuLaunchKernel")


@driver(stream_variants=True)
def cuLaunchCooperativeKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
                              hStream, kernelParams, per_thread=False):
    """Refused with CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE unless every
    block can be resident at once, as the runtime's."""
    return _launch(f, (gridDimX, gridDimY, gridDimZ), (blockDimX, blockDimY, blockDimZ), sharedMemBytes, hStream,
                   kernelParams, interposer.ffi.NULL, per_thread, True, "cuLaunchCooperativeKernel")


@driver(stream_variants=True)
def cuLaunchKernelEx(config, f, kernelParams, extra, per_thread=False):
    """Launch attributes as cudaLaunchKernelEx's: hints ignored,
    CU_LAUNCH_ATTRIBUTE_COOPERATIVE and CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    honoured, others not supported."""
    interposer.out_pointer(config, "config")
    attrs = interposer.ffi.cast("cudaLaunchAttribute *", config.attrs)  # the same layout and numbers
    cooperative, cluster = runtime_core.launch_attributes(attrs, config.numAttrs, "cuLaunchKernelEx")
    return _launch(f, (config.gridDimX, config.gridDimY, config.gridDimZ),
                   (config.blockDimX, config.blockDimY, config.blockDimZ), config.sharedMemBytes, config.hStream,
                   kernelParams, extra, per_thread, cooperative, "cuLaunchKernelEx", cluster)
