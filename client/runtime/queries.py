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


PREFER_NONE = ENUMS["cudaFuncCache"]["cudaFuncCachePreferNone"]
#: cudaDeviceSetCacheConfig's preference per device ordinal (the primary
#: context's; cuCtxSetCacheConfig of a created context keeps its own).
_cache_configs: dict[int, int] = {}


def check_cache_config(config: int, call: str) -> int:
    if config not in FUNC_CACHES:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: cudaFuncCache {config}")
    return config


def device_cache_config(ordinal: int) -> int:
    return _cache_configs.get(ordinal, PREFER_NONE)


def set_device_cache_config(ordinal: int, config: int, call: str) -> None:
    """A preference CUDA may ignore; remembered, not applied."""
    _cache_configs[ordinal] = check_cache_config(config, call)


@cuda()
def cudaDeviceSetCacheConfig(cacheConfig):
    set_device_cache_config(rt().device().ordinal, cacheConfig, "cudaDeviceSetCacheConfig")
    return SUCCESS


@cuda()
def cudaDeviceGetCacheConfig(pCacheConfig):
    out_pointer(pCacheConfig, "pCacheConfig")
    pCacheConfig[0] = device_cache_config(rt().device().ordinal)
    return SUCCESS


#: The shared memory bank size every device rcuda serves has: banks are four
#: bytes wide and fixed on every GPU CUDA 13 supports (compute capability
#: 7.5 on), so cudaDeviceGetSharedMemConfig reads it and setting another
#: does nothing, as cuda_runtime_api.h documents for such devices.
BANK_SIZE_FOUR_BYTE = ENUMS["cudaSharedMemConfig"]["cudaSharedMemBankSizeFourByte"]


def check_shared_mem_config(config: int, call: str) -> None:
    if config not in SHARED_MEM_CONFIGS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: cudaSharedMemConfig {config}")


@cuda()
def cudaDeviceGetSharedMemConfig(pConfig):
    """The hardware's fixed bank size (deprecated in CUDA 13, kept)."""
    out_pointer(pConfig, "pConfig")
    rt().device()
    pConfig[0] = BANK_SIZE_FOUR_BYTE
    return SUCCESS


@cuda()
def cudaDeviceSetSharedMemConfig(config):
    """Checked; does nothing on devices whose bank size is fixed (all of rcuda's)."""
    check_shared_mem_config(config, "cudaDeviceSetSharedMemConfig")
    rt().device()
    return SUCCESS


@cuda()
def cudaSetValidDevices(device_arr, length):
    """The list is checked.  Every device rcuda serves works, so
    the first listed is the one CUDA settles on: it becomes the calling
    thread's device unless the thread has a current context already
    (cudaSetDevice, or a runtime call that used a device).  Other threads
    start on device 0, as without a list."""
    devices = rt().devices
    if length < 0 or length > len(devices) or (length and device_arr == interposer.ffi.NULL):
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"cudaSetValidDevices: {length} devices of {len(devices)}, device_arr "
                        f"{'NULL' if device_arr == interposer.ffi.NULL else 'given'}")
    listed = [device_arr[i] for i in range(length)]
    for ordinal in listed:
        rt().device(ordinal)  # cudaErrorInvalidDevice
    if listed and rt().contexts.current("cudaSetValidDevices") is None:
        rt().set_device(listed[0])
    return SUCCESS


@cuda()
def cudaProfilerStart():
    """Succeeds and is not forwarded: there is no local profiler to start,
    and a profiler on a server sees its processes whole."""
    return SUCCESS


@cuda()
def cudaProfilerStop():
    return SUCCESS


# ------------------------------------------------------------------ GPUDirect RDMA, atomics

#: cudaFlushGPUDirectRDMAWritesOptionHost: the device supports the flush call.
FLUSH_OPTION_HOST = 1 << 0
FLUSH_TARGETS = set(ENUMS["cudaFlushGPUDirectRDMAWritesTarget"].values())
FLUSH_SCOPES = set(ENUMS["cudaFlushGPUDirectRDMAWritesScope"].values())


@cuda()
def cudaDeviceFlushGPUDirectRDMAWrites(target, scope):
    """As the current device's cudaDevAttrGPUDirectRDMAFlushWritesOptions
    says: without its Host bit (the sim's 0) the call is not supported
    (cudaErrorNotSupported, returned quietly: it is the documented answer);
    with it, there is nothing to flush: nothing rcuda writes reaches a
    device through a GPUDirect RDMA mapping."""
    if target not in FLUSH_TARGETS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaDeviceFlushGPUDirectRDMAWrites: target {target}")
    if scope not in FLUSH_SCOPES:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaDeviceFlushGPUDirectRDMAWrites: scope {scope}")
    options = rt().device().attributes.get("cudaDevAttrGPUDirectRDMAFlushWritesOptions", 0)
    return SUCCESS if options & FLUSH_OPTION_HOST else int(cudaError.cudaErrorNotSupported)


#: cudaAtomicOperationCapability's bits (cuda_runtime_api.h).
ATOMIC_SIGNED, ATOMIC_UNSIGNED, ATOMIC_REDUCTION, ATOMIC_SCALAR32, ATOMIC_SCALAR64 = (1 << b for b in range(5))
ATOMIC_OPERATIONS = ENUMS["cudaAtomicOperation"]
_INTEGER = ATOMIC_SIGNED | ATOMIC_UNSIGNED | ATOMIC_SCALAR32 | ATOMIC_SCALAR64
#: What a link with native atomics offers for each cudaAtomicOperation: the
#: scalar atomics PTX's atom/red instructions have on global memory (no
#: 128-bit or vector forms claimed, nor floating-point minimum and maximum).
NATIVE_ATOMICS = {
    "cudaAtomicOperationIntegerAdd": _INTEGER | ATOMIC_REDUCTION,
    "cudaAtomicOperationIntegerMin": _INTEGER | ATOMIC_REDUCTION,
    "cudaAtomicOperationIntegerMax": _INTEGER | ATOMIC_REDUCTION,
    "cudaAtomicOperationIntegerIncrement": ATOMIC_UNSIGNED | ATOMIC_SCALAR32 | ATOMIC_REDUCTION,
    "cudaAtomicOperationIntegerDecrement": ATOMIC_UNSIGNED | ATOMIC_SCALAR32 | ATOMIC_REDUCTION,
    "cudaAtomicOperationAnd": _INTEGER | ATOMIC_REDUCTION,
    "cudaAtomicOperationOr": _INTEGER | ATOMIC_REDUCTION,
    "cudaAtomicOperationXOR": _INTEGER | ATOMIC_REDUCTION,
    "cudaAtomicOperationExchange": _INTEGER,
    "cudaAtomicOperationCAS": _INTEGER,
    "cudaAtomicOperationFloatAdd": ATOMIC_SCALAR32 | ATOMIC_SCALAR64 | ATOMIC_REDUCTION,
    "cudaAtomicOperationFloatMin": 0,
    "cudaAtomicOperationFloatMax": 0,
}
_OPERATION_NAMES = {number: name for name, number in ATOMIC_OPERATIONS.items()}


def atomic_capabilities(capabilities, operations, count: int, native: bool, call: str) -> int:
    """Each operation's capability bits over a link: NATIVE_ATOMICS' when
    the link has native atomics, else none."""
    ffi = interposer.ffi
    if capabilities == ffi.NULL or operations == ffi.NULL or count == 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: capabilities or operations NULL, or count 0")
    names = []
    for i in range(count):  # all checked before any is written
        name = _OPERATION_NAMES.get(operations[i])
        if name is None:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: operations[{i}] = {operations[i]} is not a "
                                                             f"cudaAtomicOperation")
        names.append(name)
    for i, name in enumerate(names):
        capabilities[i] = NATIVE_ATOMICS[name] if native else 0
    return SUCCESS


@cuda()
def cudaDeviceGetHostAtomicCapabilities(capabilities, operations, count, device):
    """None: rcuda's devices are not on this host's bus (hostNativeAtomicSupported 0)."""
    found = rt().device(device)
    native = bool(found.attributes.get("cudaDevAttrHostNativeAtomicSupported", 0))
    return atomic_capabilities(capabilities, operations, count, native, "cudaDeviceGetHostAtomicCapabilities")


@cuda()
def cudaDeviceGetP2PAtomicCapabilities(capabilities, operations, count, srcDevice, dstDevice):
    """The link's, as cudaDeviceGetP2PAttribute reads it: none unless its
    server says the two GPUs have native atomics between them (never on the
    sim, nor across servers), and none when only some are (a partial link
    cannot say which)."""
    call = "cudaDeviceGetP2PAtomicCapabilities"
    source, destination = rt().device(srcDevice), rt().device(dstDevice)
    if source is destination:
        raise CudaError(cudaError.cudaErrorInvalidDevice, f"{call}: {source.label} is both ends of the link")
    link = rt().peer_copies.link_attribute
    native = (link(source, destination, "cudaDevP2PAttrNativeAtomicSupported")
              and not link(source, destination, "cudaDevP2PAttrOnlyPartialNativeAtomicSupported"))
    return atomic_capabilities(capabilities, operations, count, bool(native), call)


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
    return param_info(_kernel(func), paramIndex, paramOffset, paramSize, "cudaFuncGetParamInfo")


def param_info(kernel, index: int, offset_out, size_out, call: str) -> int:
    """Where parameter `index` of `kernel` sits in its parameter block (the
    layout launches pack: client/modules.py KernelParams); `size_out` may
    be NULL (cudaFuncGetParamInfo, cuFuncGetParamInfo, cuKernelGetParamInfo)."""
    out_pointer(offset_out, "paramOffset")
    params = kernel.params
    if index >= len(params.offsets):
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: the kernel has {len(params.offsets)} parameters, not {index + 1}")
    offset_out[0] = params.offsets[index]
    if size_out != interposer.ffi.NULL:
        size_out[0] = params.sizes[index]
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
