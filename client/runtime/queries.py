"""CUDA runtime functions: device and kernel queries, occupancy, limits,
flags, cudaDeviceReset.

Device attributes and properties are fetched once per device (when it is
opened) and answered here.  Kernel attributes come from the server (the
cupy backend asks the driver; the sim backend reads the program's cubin) and
are cached per device.  Occupancy is computed from them with the same
rules as CUDA's occupancy calculator (rcuda/launch_rules.py, which checks
cooperative launches with it too).
"""
from __future__ import annotations

import logging

from rcuda._generated.cuda_enums import ENUMS, MACROS
from rcuda.device_attributes import attribute_name
from rcuda.errors import CudaError, cudaError
from rcuda import launch_rules
from rcuda.launch_rules import active_blocks_per_sm

from .. import interposer
from ..driver.loading import kernel_on
from .core import SUCCESS, cuda, launch_attributes
from ..interposer import address, c_string, fill_struct, out_pointer

log = logging.getLogger(__name__)

LIMITS = ENUMS["cudaLimit"]
#: cudaDeviceGetLimit before any cudaDeviceSetLimit: CUDA 13's defaults.
DEFAULT_LIMITS = {
    "cudaLimitStackSize": 1024,
    "cudaLimitPrintfFifoSize": 1 << 20,
    "cudaLimitMallocHeapSize": 8 << 20,
    "cudaLimitDevRuntimeSyncDepth": 2,
    "cudaLimitDevRuntimePendingLaunchCount": 2048,
    "cudaLimitMaxL2FetchGranularity": 32,
    "cudaLimitPersistingL2CacheSize": 0,
}
FUNC_ATTRIBUTES = {v: k for k, v in ENUMS["cudaFuncAttribute"].items()}
FUNC_CACHES = set(ENUMS["cudaFuncCache"].values())
SHARED_MEM_CONFIGS = set(ENUMS["cudaSharedMemConfig"].values())
DEVICE_FLAGS = MACROS["cudaDeviceMask"]


def rt():
    return interposer.rt


# ------------------------------------------------------------------ devices


@cuda()
def cudaDeviceGetAttribute(value, attr, device):
    out_pointer(value, "value")
    name = attribute_name(attr)
    answers = rt().device(device).attributes
    if name is None or name not in answers:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaDeviceGetAttribute: attribute {attr} "
                                                         f"({name or 'unknown'}) is not known for this device")
    value[0] = answers[name]
    return SUCCESS


@cuda()
def cudaChooseDevice(device, prop):
    """The device whose compute capability is closest to prop's (at least it,
    if any is), as CUDA chooses."""
    out_pointer(device, "device")
    out_pointer(prop, "prop")
    wanted = (prop.major, prop.minor)
    devices = rt().devices
    if not devices:
        raise CudaError(cudaError.cudaErrorNoDevice, "no devices")

    def distance(d):
        cc = (d.properties.get("major", 0), d.properties.get("minor", 0))
        return (cc < wanted, abs((cc[0] - wanted[0]) * 10 + cc[1] - wanted[1]), d.ordinal)

    device[0] = min(devices, key=distance).ordinal
    return SUCCESS


@cuda()
def cudaSetDeviceFlags(flags):
    if flags & ~DEVICE_FLAGS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaSetDeviceFlags({flags:#x})")
    rt().device().flags = flags  # cudaDeviceMapHost too: mapped memory needs no more (client/memory/mapped.py)
    return SUCCESS


@cuda()
def cudaGetDeviceFlags(flags):
    out_pointer(flags, "flags")
    flags[0] = rt().device().flags
    return SUCCESS


@cuda()
def cudaDeviceReset():
    """Frees everything the process had on the current device (memory,
    streams, events, loaded modules) and clears its errors, sticky ones too."""
    rt().reset_device(rt().device())
    return SUCCESS


@cuda()
def cudaDeviceGetPCIBusId(pciBusId, len_, device):
    if pciBusId == interposer.ffi.NULL or len_ <= 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaDeviceGetPCIBusId: bad buffer")
    text = _pci_bus_id(rt().device(device)).encode()[:len_ - 1] + b"\0"
    interposer.ffi.memmove(pciBusId, text, len(text))
    return SUCCESS


def _pci_bus_id(device) -> str:
    p = device.properties
    return f"{p.get('pciDomainID', 0):04x}:{p.get('pciBusID', 0):02x}:{p.get('pciDeviceID', 0):02x}.0"


@cuda()
def cudaDeviceGetByPCIBusId(device, pciBusId):
    out_pointer(device, "device")
    wanted = interposer.ffi.string(pciBusId).decode().lower()
    for candidate in rt().devices:
        if _pci_bus_id(candidate) == wanted or _pci_bus_id(candidate)[5:] == wanted:
            device[0] = candidate.ordinal
            return SUCCESS
    raise CudaError(cudaError.cudaErrorInvalidDevice, f"no device at PCI bus id {wanted}")


@cuda()
def cudaDeviceGetLimit(pValue, limit):
    out_pointer(pValue, "pValue")
    pValue[0] = rt().limits.get(_limit_name(limit), DEFAULT_LIMITS.get(_limit_name(limit), 0))
    return SUCCESS


@cuda()
def cudaDeviceSetLimit(limit, value):
    """Kept on the client: the sim backend has no such limits to apply, and
    CUDA itself may round or ignore the values (it documents as much).  The
    persisting L2 size is clamped to the device's persistingL2CacheMaxSize."""
    name = _limit_name(limit)
    if name == "cudaLimitPersistingL2CacheSize":
        most = rt().device().properties.get("persistingL2CacheMaxSize", 0)
        if not most:
            raise CudaError(cudaError.cudaErrorUnsupportedLimit,
                            f"cudaDeviceSetLimit: {rt().device().label} has no persisting L2 cache")
        value = min(value, most)
    rt().limits[name] = value
    return SUCCESS


@cuda()
def cudaCtxResetPersistingL2Cache():
    """Applied by the server's backend (cupy); the sim has no cache."""
    rt().device().request("reset_persisting_l2")
    return SUCCESS


def _limit_name(limit: int) -> str:
    for name, number in LIMITS.items():
        if number == limit:
            return name
    raise CudaError(cudaError.cudaErrorUnsupportedLimit, f"cudaLimit {limit}")


_cache_config = {"device": ENUMS["cudaFuncCache"]["cudaFuncCachePreferNone"]}


@cuda()
def cudaDeviceSetCacheConfig(cacheConfig):
    """A preference CUDA may ignore; remembered, not applied."""
    if cacheConfig not in FUNC_CACHES:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaFuncCache {cacheConfig}")
    _cache_config["device"] = cacheConfig
    return SUCCESS


@cuda()
def cudaDeviceGetCacheConfig(pCacheConfig):
    out_pointer(pCacheConfig, "pCacheConfig")
    pCacheConfig[0] = _cache_config["device"]
    return SUCCESS


@cuda()
def cudaProfilerStart():
    """Succeeds and is not forwarded: there is no local profiler to start,
    and a profiler on a server sees its processes whole."""
    return SUCCESS


@cuda()
def cudaProfilerStop():
    return SUCCESS


# ------------------------------------------------------------------ kernels


def _kernel(func):
    """A host stub's kernel, or a library's cudaKernel_t's on the current device."""
    return kernel_on(address(func), "a kernel query")


@cuda()
def cudaFuncGetAttributes(attr, func):
    out_pointer(attr, "attr")
    fill_struct(attr, rt().device().function_attributes(_kernel(func)))
    return SUCCESS


@cuda()
def cudaFuncSetAttribute(func, attr, value):
    name = FUNC_ATTRIBUTES.get(attr)
    if name is None or name == "cudaFuncAttributeMax":
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaFuncAttribute {attr}")
    rt().device().set_function_attribute(_kernel(func), name, value)
    return SUCCESS


@cuda()
def cudaFuncSetCacheConfig(func, cacheConfig):
    """A preference CUDA may ignore; checked, not applied."""
    _kernel(func)
    if cacheConfig not in FUNC_CACHES:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaFuncCache {cacheConfig}")
    return SUCCESS


@cuda()
def cudaFuncSetSharedMemConfig(func, config):
    _kernel(func)
    if config not in SHARED_MEM_CONFIGS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaSharedMemConfig {config}")
    return SUCCESS


@cuda()
def cudaFuncGetName(name, func):
    out_pointer(name, "name")
    name[0] = c_string(_kernel(func).name)
    return SUCCESS


@cuda()
def cudaFuncGetParamInfo(func, paramIndex, paramOffset, paramSize):
    params = _kernel(func).params
    if paramIndex >= len(params.offsets):
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"cudaFuncGetParamInfo: the kernel has {len(params.offsets)} parameters, not {paramIndex + 1}")
    if paramOffset != interposer.ffi.NULL:
        paramOffset[0] = params.offsets[paramIndex]
    if paramSize != interposer.ffi.NULL:
        paramSize[0] = params.sizes[paramIndex]
    return SUCCESS


# ------------------------------------------------------------------ occupancy


def max_active_blocks(device, kernel, block_size: int, dynamic_smem: int) -> int:
    """Resident blocks per multiprocessor (the occupancy calculator); 0 when
    the dynamic shared memory is more than the kernel may have."""
    attrs = device.function_attributes(kernel)
    if dynamic_smem > attrs.get("maxDynamicSharedSizeBytes", dynamic_smem):
        return 0
    return active_blocks_per_sm(device.properties, attrs, block_size, dynamic_smem)


def available_dynamic_smem(device, kernel, num_blocks: int, block_size: int) -> int:
    """The dynamic shared memory each of `num_blocks` resident blocks per
    multiprocessor may have (0 when they cannot all be resident)."""
    props, attrs = device.properties, device.function_attributes(kernel)
    if num_blocks <= 0 or active_blocks_per_sm(props, attrs, block_size, 0) < num_blocks:
        return 0
    per_block = props["sharedMemPerMultiprocessor"] // num_blocks - props.get("reservedSharedMemPerBlock", 0)
    return max(0, min(per_block - attrs.get("sharedSizeBytes", 0), attrs.get("maxDynamicSharedSizeBytes", per_block)))


@cuda()
def cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, flags):
    out_pointer(numBlocks, "numBlocks")
    numBlocks[0] = max_active_blocks(rt().device(), _kernel(func), blockSize, dynamicSMemSize)
    return SUCCESS


@cuda()
def cudaOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, func, blockSize, dynamicSMemSize):
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0)


@cuda()
def cudaOccupancyAvailableDynamicSMemPerBlock(dynamicSmemSize, func, numBlocks, blockSize):
    out_pointer(dynamicSmemSize, "dynamicSmemSize")
    dynamicSmemSize[0] = available_dynamic_smem(rt().device(), _kernel(func), numBlocks, blockSize)
    return SUCCESS


# Thread block clusters (rcuda/launch_rules.py): a cluster fits when its
# blocks fit at once on the multiprocessors one cluster may span (16, a
# GPC); the device has multiProcessorCount // 16 such groups.


def potential_cluster_size(device, kernel, block, dynamic_smem: int) -> int:
    """The most blocks a cluster of `kernel` may have with this block shape
    and dynamic shared memory (its required cluster's, when it has one)."""
    attrs = device.function_attributes(kernel)
    if dynamic_smem > attrs.get("maxDynamicSharedSizeBytes", dynamic_smem):
        return 0
    return launch_rules.max_potential_cluster_size(device.properties, attrs, block[0] * block[1] * block[2],
                                                   dynamic_smem)


def active_clusters(device, kernel, block, dynamic_smem: int, cluster, what: str) -> int:
    """Clusters of `cluster`'s shape (None: the kernel's own) resident at
    once; cudaErrorInvalidClusterSize for a shape the kernel may not have."""
    attrs = device.function_attributes(kernel)
    count = launch_rules.max_active_clusters(device.properties, attrs, kernel.name, block, dynamic_smem, cluster,
                                             where=f"{what} on {device.label}: ")
    return 0 if dynamic_smem > attrs.get("maxDynamicSharedSizeBytes", dynamic_smem) else count


@cuda()
def cudaOccupancyMaxPotentialClusterSize(clusterSize, func, launchConfig):
    """The cluster dimensions among the config's attributes are ignored, as
    CUDA ignores them."""
    out_pointer(clusterSize, "clusterSize")
    out_pointer(launchConfig, "launchConfig")
    block = launchConfig.blockDim
    clusterSize[0] = potential_cluster_size(rt().device(), _kernel(func), (block.x, block.y, block.z),
                                            launchConfig.dynamicSmemBytes)
    return SUCCESS


@cuda()
def cudaOccupancyMaxActiveClusters(numClusters, func, launchConfig):
    """The cluster shape is the config's cudaLaunchAttributeClusterDimension,
    or the kernel's own; a kernel without one needs the attribute."""
    what = "cudaOccupancyMaxActiveClusters"
    out_pointer(numClusters, "numClusters")
    out_pointer(launchConfig, "launchConfig")
    _, cluster = launch_attributes(launchConfig.attrs, launchConfig.numAttrs, what)
    block = launchConfig.blockDim
    numClusters[0] = active_clusters(rt().device(), _kernel(func), (block.x, block.y, block.z),
                                     launchConfig.dynamicSmemBytes, cluster, what)
    return SUCCESS
