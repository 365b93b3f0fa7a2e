"""CUDA driver API: function attributes, loading and parameter layouts on
CUfunction handles, the same queries on CUkernel handles, and occupancy.

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
from .handles import DriverFunction, DriverKernel, handles
from .loading import function_of, kernel_of

#: CUfunctionLoadingState: CU_FUNCTION_LOADING_STATE_UNLOADED, CU_FUNCTION_LOADING_STATE_LOADED.
UNLOADED, LOADED = 0, 1

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
    runtime_queries.check_cache_config(config, "cuFuncSetCacheConfig")
    return SUCCESS


@driver()
def cuFuncSetSharedMemConfig(hfunc, config):
    """Deprecated; checked, and nothing to apply: every device rcuda serves
    has fixed four-byte banks (cudaFuncSetSharedMemConfig's answer)."""
    function(hfunc, "cuFuncSetSharedMemConfig")
    runtime_queries.check_shared_mem_config(config, "cuFuncSetSharedMemConfig")
    return SUCCESS


@driver()
def cuFuncGetName(name, hfunc):
    out_pointer(name, "name")
    name[0] = c_string(function(hfunc, "cuFuncGetName").kernel.name)
    return SUCCESS


@driver()
def cuFuncGetModule(hmod, hfunc):
    """The CUmodule the function was got from; a program kernel's
    (cudaGetFuncBySymbol) is the module rcuda keeps for its fatbinary on
    that device, which the program must not unload (as in CUDA)."""
    out_pointer(hmod, "hmod")
    hmod[0] = interposer.ffi.cast("CUmodule", function(hfunc, "cuFuncGetModule").module.handle)
    return SUCCESS


@driver()
def cuFuncGetParamInfo(func, paramIndex, paramOffset, paramSize):
    """From the kernel's parameter layout, the one launches pack
    (cudaFuncGetParamInfo's)."""
    kernel = function(func, "cuFuncGetParamInfo").kernel
    return runtime_queries.param_info(kernel, paramIndex, paramOffset, paramSize, "cuFuncGetParamInfo")


@driver()
def cuFuncIsLoaded(state, function_):
    """Loaded once the function is known to its GPU's server (registered at
    its first launch, attribute query or cuFuncLoad): rcuda loads
    functions lazily, as CUDA's lazy loading does (cuModuleGetLoadingMode)."""
    out_pointer(state, "state")
    fn = function(function_, "cuFuncIsLoaded")
    state[0] = LOADED if fn.module.device.has_function(fn.kernel) else UNLOADED
    return SUCCESS


@driver()
def cuFuncLoad(function_):
    """Registers the function with its GPU's server now (a kernel the
    server cannot run fails here); no effect on a loaded one."""
    fn = function(function_, "cuFuncLoad")
    fn.module.device.function_id(fn.kernel)
    return SUCCESS


# ------------------------------------------------------------------ kernels (CUkernel)


def _kernel_handle(kernel, call: str) -> int:
    require_initialized()
    value = interposer.address(kernel)
    if value == 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: kernel is NULL")
    return value


@driver()
def cuKernelGetName(name, hfunc):
    """The kernel's name as its image has it (mangled unless extern "C")."""
    out_pointer(name, "name")
    name[0] = c_string(kernel_of(_kernel_handle(hfunc, "cuKernelGetName"), "cuKernelGetName").name)
    return SUCCESS


@driver()
def cuKernelGetParamInfo(kernel, paramIndex, paramOffset, paramSize):
    """From the kernel's image: no device needed."""
    found = kernel_of(_kernel_handle(kernel, "cuKernelGetParamInfo"), "cuKernelGetParamInfo")
    return runtime_queries.param_info(found, paramIndex, paramOffset, paramSize, "cuKernelGetParamInfo")


@driver()
def cuKernelGetLibrary(pLib, kernel):
    """A library's kernel: its CUlibrary.  A kernel of the program's own
    (cudaGetKernel's) comes from no library rcuda can name:
    CUDA_ERROR_NOT_FOUND."""
    out_pointer(pLib, "pLib")
    handle = _kernel_handle(kernel, "cuKernelGetLibrary")
    found = handles.find(handle, DriverKernel)
    if found is None:
        kernel_of(handle, "cuKernelGetLibrary")  # CUDA_ERROR_INVALID_HANDLE if it is no kernel at all
        raise CudaError(cudaError.cudaErrorSymbolNotFound,  # CUDA_ERROR_NOT_FOUND
                        "cuKernelGetLibrary: a kernel of the program's own belongs to no CUlibrary")
    pLib[0] = interposer.ffi.cast("CUlibrary", found.library.handle)
    return SUCCESS


@driver()
def cuKernelSetCacheConfig(kernel, config, dev):
    """A preference CUDA may ignore; checked, not applied (as cuFuncSetCacheConfig)."""
    kernel_of(_kernel_handle(kernel, "cuKernelSetCacheConfig"), "cuKernelSetCacheConfig")
    runtime_queries.check_cache_config(config, "cuKernelSetCacheConfig")
    interposer.rt.device(dev)  # CUDA_ERROR_INVALID_DEVICE
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
