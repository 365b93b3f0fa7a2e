"""CUDA driver API: function attributes and occupancy on CUfunction handles.

A CUfunction is a client/driver/handles.py DriverFunction: a runtime Kernel
on the device of the context its module was loaded in, so attributes come
from the same server reply cudaFuncGetAttributes reads, and occupancy from
the same calculator (client/runtime/queries.py, rcuda/launch_rules.py).
CUfunction_attribute numbers the cudaFuncAttributes fields and, from 8 on,
the settable cudaFuncAttribute values alike.
"""
from __future__ import annotations

from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..runtime import library_management as runtime_libraries
from ..runtime import core as runtime_core
from ..runtime import queries as runtime_queries
from ..interposer import c_string, out_pointer
from .registry import SUCCESS, driver, from_runtime, require_initialized
from .handles import DriverFunction, handles
from .loading import function_of

PREFIX = "CU_FUNC_ATTRIBUTE_"
#: The cudaFuncAttributes fields whose names are not the attribute's words.
FIELD_ALIASES = {"PREFERRED_SHARED_MEMORY_CARVEOUT": "preferredShmemCarveout",
                 "CLUSTER_SIZE_MUST_BE_SET": "clusterDimMustBeSet"}
#: cuOccupancy*WithFlags: CU_OCCUPANCY_DEFAULT, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE (no cache to override here).
OCCUPANCY_FLAGS = (0, 1)


def function(hfunc, call: str) -> DriverFunction:
    require_initialized()
    return handles.get(interposer.address(hfunc), DriverFunction, call)


def _on_device(fn: DriverFunction):
    return fn.module.device, fn.kernel


def _field(attrib: int, call: str) -> str:
    name = interposer.ffi.typeof("CUfunction_attribute").elements.get(attrib)
    if name is None or name == PREFIX + "MAX":
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {attrib} is not a CUfunction_attribute")
    words = name[len(PREFIX):]
    if words in FIELD_ALIASES:
        return FIELD_ALIASES[words]
    fields = {f.lower(): f for f, _ in interposer.ffi.typeof("struct cudaFuncAttributes").fields}
    return fields[words.replace("_", "").lower()]


# ------------------------------------------------------------------ attributes


@driver()
def cuFuncGetAttribute(pi, attrib, hfunc):
    out_pointer(pi, "pi")
    device, kernel = _on_device(function(hfunc, "cuFuncGetAttribute"))
    pi[0] = device.function_attributes(kernel).get(_field(attrib, "cuFuncGetAttribute"), 0)
    return SUCCESS


@driver()
def cuKernelGetAttribute(pi, attrib, kernel, dev):
    """cuFuncGetAttribute of the kernel's CUfunction on device `dev` (its
    library is loaded there first if it was not); a kernel of the program's
    own (cudaGetKernel's) too."""
    require_initialized()
    fn = function_of(interposer.address(kernel), "cuKernelGetAttribute", interposer.rt.device(dev))
    return cuFuncGetAttribute(pi, attrib, fn.handle)


@driver()
def cuKernelSetAttribute(attrib, val, kernel, dev):
    """cuFuncSetAttribute of the kernel on device `dev`: the runtime's
    cudaKernelSetAttributeForDevice (CUfunction_attribute numbers the
    settable attributes as cudaFuncAttribute does)."""
    require_initialized()
    return from_runtime(runtime_libraries.cudaKernelSetAttributeForDevice(kernel, attrib, val, dev))


@driver()
def cuFuncSetAttribute(hfunc, attrib, value):
    """Only the attributes CUDA lets a program set (cudaFuncSetAttribute's);
    the others are CUDA_ERROR_INVALID_VALUE."""
    device, kernel = _on_device(function(hfunc, "cuFuncSetAttribute"))
    name = runtime_queries.FUNC_ATTRIBUTES.get(attrib)
    if name is None or name == "cudaFuncAttributeMax":
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cuFuncSetAttribute: attribute {attrib} cannot be set")
    device.set_function_attribute(kernel, name, value)
    return SUCCESS


@driver()
def cuFuncSetCacheConfig(hfunc, config):
    """A preference CUDA may ignore; checked, not applied."""
    function(hfunc, "cuFuncSetCacheConfig")
    if config not in runtime_queries.FUNC_CACHES:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cuFuncSetCacheConfig: CUfunc_cache {config}")
    return SUCCESS


@driver()
def cuFuncGetName(name, hfunc):
    out_pointer(name, "name")
    name[0] = c_string(function(hfunc, "cuFuncGetName").kernel.name)
    return SUCCESS


# ------------------------------------------------------------------ occupancy


def _check_occupancy_flags(flags: int, call: str) -> None:
    if flags not in OCCUPANCY_FLAGS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: flags {flags:#x}")


@driver()
def cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, flags):
    out_pointer(numBlocks, "numBlocks")
    _check_occupancy_flags(flags, "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    device, kernel = _on_device(function(func, "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
    numBlocks[0] = runtime_queries.max_active_blocks(device, kernel, blockSize, dynamicSMemSize)
    return SUCCESS


@driver()
def cuOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, func, blockSize, dynamicSMemSize):
    return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0)


@driver()
def cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                              dynamicSMemSize, blockSizeLimit, flags):
    """The block size with the most resident threads per multiprocessor
    (the smallest wins a tie: sizes are tried from the largest down, a warp
    at a time), as cuda_runtime.h's cudaOccupancyMaxPotentialBlockSize
    searches; the callback, when given, says each size's dynamic shared memory."""
    call = "cuOccupancyMaxPotentialBlockSize"
    out_pointer(minGridSize, "minGridSize")
    out_pointer(blockSize, "blockSize")
    _check_occupancy_flags(flags, call)
    device, kernel = _on_device(function(func, call))
    props = device.properties
    limit = min(blockSizeLimit or props["maxThreadsPerBlock"], props["maxThreadsPerBlock"],
                device.function_attributes(kernel)["maxThreadsPerBlock"])
    warp = props["warpSize"]
    best_threads = best_size = best_blocks = 0
    for aligned in range(-(-limit // warp) * warp, 0, -warp):
        size = min(limit, aligned)
        shared = blockSizeToDynamicSMemSize(size) if blockSizeToDynamicSMemSize != interposer.ffi.NULL else dynamicSMemSize
        blocks = runtime_queries.max_active_blocks(device, kernel, size, shared)
        if blocks * size > best_threads:
            best_threads, best_size, best_blocks = blocks * size, size, blocks
        if best_threads == props["maxThreadsPerMultiProcessor"]:
            break
    minGridSize[0] = best_blocks * props["multiProcessorCount"]
    blockSize[0] = best_size
    return SUCCESS


@driver()
def cuOccupancyMaxPotentialBlockSize(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize,
                                     blockSizeLimit):
    return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
                                                     dynamicSMemSize, blockSizeLimit, 0)


@driver()
def cuOccupancyAvailableDynamicSMemPerBlock(dynamicSmemSize, func, numBlocks, blockSize):
    out_pointer(dynamicSmemSize, "dynamicSmemSize")
    device, kernel = _on_device(function(func, "cuOccupancyAvailableDynamicSMemPerBlock"))
    dynamicSmemSize[0] = runtime_queries.available_dynamic_smem(device, kernel, numBlocks, blockSize)
    return SUCCESS


@driver()
def cuOccupancyMaxPotentialClusterSize(clusterSize, func, config):
    """As cudaOccupancyMaxPotentialClusterSize (client/runtime/queries.py):
    the config's cluster dimensions are ignored."""
    call = "cuOccupancyMaxPotentialClusterSize"
    out_pointer(clusterSize, "clusterSize")
    out_pointer(config, "config")
    device, kernel = _on_device(function(func, call))
    clusterSize[0] = runtime_queries.potential_cluster_size(
        device, kernel, (config.blockDimX, config.blockDimY, config.blockDimZ), config.sharedMemBytes)
    return SUCCESS


@driver()
def cuOccupancyMaxActiveClusters(numClusters, func, config):
    """As cudaOccupancyMaxActiveClusters: the shape is the config's
    CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, or the kernel's own."""
    call = "cuOccupancyMaxActiveClusters"
    out_pointer(numClusters, "numClusters")
    out_pointer(config, "config")
    device, kernel = _on_device(function(func, call))
    attrs = interposer.ffi.cast("cudaLaunchAttribute *", config.attrs)  # the same layout and numbers
    _, cluster = runtime_core.launch_attributes(attrs, config.numAttrs, call)
    numClusters[0] = runtime_queries.active_clusters(
        device, kernel, (config.blockDimX, config.blockDimY, config.blockDimZ), config.sharedMemBytes, cluster, call)
    return SUCCESS
