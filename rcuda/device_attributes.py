"""cudaDeviceGetAttribute values from cudaDeviceProp fields.

A real GPU answers every `cudaDeviceAttr` itself (the cupy backend asks it);
the sim backend describes its GPUs as `cudaDeviceProp` fields and derives the
attributes from them with this table.  Attributes are sent on the wire by
their CUDA names (`cudaDevAttrClockRate`), never by number.

Each entry is (property field, index into it or None).  Attributes absent
from cudaDeviceProp in CUDA 13 (clock rates, compute mode, ...) are read from
same-named extra fields that a backend may add to its properties.
"""
from __future__ import annotations

from rcuda._generated.cuda_enums import ENUMS

DEVICE_ATTRIBUTES: dict[str, int] = ENUMS["cudaDeviceAttr"]

#: attribute name -> (cudaDeviceProp field, index or None)
FROM_PROPERTIES: dict[str, tuple[str, int | None]] = {
    "cudaDevAttrMaxThreadsPerBlock": ("maxThreadsPerBlock", None),
    "cudaDevAttrMaxBlockDimX": ("maxThreadsDim", 0),
    "cudaDevAttrMaxBlockDimY": ("maxThreadsDim", 1),
    "cudaDevAttrMaxBlockDimZ": ("maxThreadsDim", 2),
    "cudaDevAttrMaxGridDimX": ("maxGridSize", 0),
    "cudaDevAttrMaxGridDimY": ("maxGridSize", 1),
    "cudaDevAttrMaxGridDimZ": ("maxGridSize", 2),
    "cudaDevAttrMaxSharedMemoryPerBlock": ("sharedMemPerBlock", None),
    "cudaDevAttrTotalConstantMemory": ("totalConstMem", None),
    "cudaDevAttrWarpSize": ("warpSize", None),
    "cudaDevAttrMaxPitch": ("memPitch", None),
    "cudaDevAttrMaxRegistersPerBlock": ("regsPerBlock", None),
    "cudaDevAttrClockRate": ("clockRate", None),
    "cudaDevAttrTextureAlignment": ("textureAlignment", None),
    "cudaDevAttrGpuOverlap": ("asyncEngineCount", None),  # deprecated: "can overlap" = has a copy engine
    "cudaDevAttrMultiProcessorCount": ("multiProcessorCount", None),
    "cudaDevAttrKernelExecTimeout": ("kernelExecTimeoutEnabled", None),
    "cudaDevAttrIntegrated": ("integrated", None),
    "cudaDevAttrCanMapHostMemory": ("canMapHostMemory", None),
    "cudaDevAttrComputeMode": ("computeMode", None),
    "cudaDevAttrMaxTexture1DWidth": ("maxTexture1D", None),
    "cudaDevAttrMaxTexture2DWidth": ("maxTexture2D", 0),
    "cudaDevAttrMaxTexture2DHeight": ("maxTexture2D", 1),
    "cudaDevAttrMaxTexture3DWidth": ("maxTexture3D", 0),
    "cudaDevAttrMaxTexture3DHeight": ("maxTexture3D", 1),
    "cudaDevAttrMaxTexture3DDepth": ("maxTexture3D", 2),
    "cudaDevAttrMaxTexture2DLayeredWidth": ("maxTexture2DLayered", 0),
    "cudaDevAttrMaxTexture2DLayeredHeight": ("maxTexture2DLayered", 1),
    "cudaDevAttrMaxTexture2DLayeredLayers": ("maxTexture2DLayered", 2),
    "cudaDevAttrSurfaceAlignment": ("surfaceAlignment", None),
    "cudaDevAttrConcurrentKernels": ("concurrentKernels", None),
    "cudaDevAttrEccEnabled": ("ECCEnabled", None),
    "cudaDevAttrPciBusId": ("pciBusID", None),
    "cudaDevAttrPciDeviceId": ("pciDeviceID", None),
    "cudaDevAttrTccDriver": ("tccDriver", None),
    "cudaDevAttrMemoryClockRate": ("memoryClockRate", None),
    "cudaDevAttrGlobalMemoryBusWidth": ("memoryBusWidth", None),
    "cudaDevAttrL2CacheSize": ("l2CacheSize", None),
    "cudaDevAttrMaxThreadsPerMultiProcessor": ("maxThreadsPerMultiProcessor", None),
    "cudaDevAttrAsyncEngineCount": ("asyncEngineCount", None),
    "cudaDevAttrUnifiedAddressing": ("unifiedAddressing", None),
    "cudaDevAttrMaxTexture1DLayeredWidth": ("maxTexture1DLayered", 0),
    "cudaDevAttrMaxTexture1DLayeredLayers": ("maxTexture1DLayered", 1),
    "cudaDevAttrMaxTexture2DGatherWidth": ("maxTexture2DGather", 0),
    "cudaDevAttrMaxTexture2DGatherHeight": ("maxTexture2DGather", 1),
    "cudaDevAttrMaxTexture3DWidthAlt": ("maxTexture3DAlt", 0),
    "cudaDevAttrMaxTexture3DHeightAlt": ("maxTexture3DAlt", 1),
    "cudaDevAttrMaxTexture3DDepthAlt": ("maxTexture3DAlt", 2),
    "cudaDevAttrPciDomainId": ("pciDomainID", None),
    "cudaDevAttrTexturePitchAlignment": ("texturePitchAlignment", None),
    "cudaDevAttrMaxTextureCubemapWidth": ("maxTextureCubemap", None),
    "cudaDevAttrMaxTextureCubemapLayeredWidth": ("maxTextureCubemapLayered", 0),
    "cudaDevAttrMaxTextureCubemapLayeredLayers": ("maxTextureCubemapLayered", 1),
    "cudaDevAttrMaxSurface1DWidth": ("maxSurface1D", None),
    "cudaDevAttrMaxSurface2DWidth": ("maxSurface2D", 0),
    "cudaDevAttrMaxSurface2DHeight": ("maxSurface2D", 1),
    "cudaDevAttrMaxSurface3DWidth": ("maxSurface3D", 0),
    "cudaDevAttrMaxSurface3DHeight": ("maxSurface3D", 1),
    "cudaDevAttrMaxSurface3DDepth": ("maxSurface3D", 2),
    "cudaDevAttrMaxSurface1DLayeredWidth": ("maxSurface1DLayered", 0),
    "cudaDevAttrMaxSurface1DLayeredLayers": ("maxSurface1DLayered", 1),
    "cudaDevAttrMaxSurface2DLayeredWidth": ("maxSurface2DLayered", 0),
    "cudaDevAttrMaxSurface2DLayeredHeight": ("maxSurface2DLayered", 1),
    "cudaDevAttrMaxSurface2DLayeredLayers": ("maxSurface2DLayered", 2),
    "cudaDevAttrMaxSurfaceCubemapWidth": ("maxSurfaceCubemap", None),
    "cudaDevAttrMaxSurfaceCubemapLayeredWidth": ("maxSurfaceCubemapLayered", 0),
    "cudaDevAttrMaxSurfaceCubemapLayeredLayers": ("maxSurfaceCubemapLayered", 1),
    "cudaDevAttrMaxTexture1DLinearWidth": ("maxTexture1DLinear", None),
    "cudaDevAttrMaxTexture2DLinearWidth": ("maxTexture2DLinear", 0),
    "cudaDevAttrMaxTexture2DLinearHeight": ("maxTexture2DLinear", 1),
    "cudaDevAttrMaxTexture2DLinearPitch": ("maxTexture2DLinear", 2),
    "cudaDevAttrMaxTexture2DMipmappedWidth": ("maxTexture2DMipmap", 0),
    "cudaDevAttrMaxTexture2DMipmappedHeight": ("maxTexture2DMipmap", 1),
    "cudaDevAttrComputeCapabilityMajor": ("major", None),
    "cudaDevAttrComputeCapabilityMinor": ("minor", None),
    "cudaDevAttrMaxTexture1DMipmappedWidth": ("maxTexture1DMipmap", None),
    "cudaDevAttrStreamPrioritiesSupported": ("streamPrioritiesSupported", None),
    "cudaDevAttrGlobalL1CacheSupported": ("globalL1CacheSupported", None),
    "cudaDevAttrLocalL1CacheSupported": ("localL1CacheSupported", None),
    "cudaDevAttrMaxSharedMemoryPerMultiprocessor": ("sharedMemPerMultiprocessor", None),
    "cudaDevAttrMaxRegistersPerMultiprocessor": ("regsPerMultiprocessor", None),
    "cudaDevAttrManagedMemory": ("managedMemory", None),
    "cudaDevAttrIsMultiGpuBoard": ("isMultiGpuBoard", None),
    "cudaDevAttrMultiGpuBoardGroupID": ("multiGpuBoardGroupID", None),
    "cudaDevAttrHostNativeAtomicSupported": ("hostNativeAtomicSupported", None),
    "cudaDevAttrSingleToDoublePrecisionPerfRatio": ("singleToDoublePrecisionPerfRatio", None),
    "cudaDevAttrPageableMemoryAccess": ("pageableMemoryAccess", None),
    "cudaDevAttrConcurrentManagedAccess": ("concurrentManagedAccess", None),
    "cudaDevAttrComputePreemptionSupported": ("computePreemptionSupported", None),
    "cudaDevAttrCanUseHostPointerForRegisteredMem": ("canUseHostPointerForRegisteredMem", None),
    "cudaDevAttrCooperativeLaunch": ("cooperativeLaunch", None),
    "cudaDevAttrMaxSharedMemoryPerBlockOptin": ("sharedMemPerBlockOptin", None),
    "cudaDevAttrCanFlushRemoteWrites": ("canFlushRemoteWrites", None),
    "cudaDevAttrHostRegisterSupported": ("hostRegisterSupported", None),
    "cudaDevAttrPageableMemoryAccessUsesHostPageTables": ("pageableMemoryAccessUsesHostPageTables", None),
    "cudaDevAttrDirectManagedMemAccessFromHost": ("directManagedMemAccessFromHost", None),
    "cudaDevAttrMaxBlocksPerMultiprocessor": ("maxBlocksPerMultiProcessor", None),
    "cudaDevAttrMaxPersistingL2CacheSize": ("persistingL2CacheMaxSize", None),
    "cudaDevAttrMaxAccessPolicyWindowSize": ("accessPolicyMaxWindowSize", None),
    "cudaDevAttrReservedSharedMemoryPerBlock": ("reservedSharedMemPerBlock", None),
    "cudaDevAttrSparseCudaArraySupported": ("sparseCudaArraySupported", None),
    "cudaDevAttrHostRegisterReadOnlySupported": ("hostRegisterReadOnlySupported", None),
    "cudaDevAttrTimelineSemaphoreInteropSupported": ("timelineSemaphoreInteropSupported", None),
    "cudaDevAttrMemoryPoolsSupported": ("memoryPoolsSupported", None),
    "cudaDevAttrGPUDirectRDMASupported": ("gpuDirectRDMASupported", None),
    "cudaDevAttrGPUDirectRDMAFlushWritesOptions": ("gpuDirectRDMAFlushWritesOptions", None),
    "cudaDevAttrGPUDirectRDMAWritesOrdering": ("gpuDirectRDMAWritesOrdering", None),
    "cudaDevAttrMemoryPoolSupportedHandleTypes": ("memoryPoolSupportedHandleTypes", None),
    "cudaDevAttrClusterLaunch": ("clusterLaunch", None),
    "cudaDevAttrDeferredMappingCudaArraySupported": ("deferredMappingCudaArraySupported", None),
    "cudaDevAttrIpcEventSupport": ("ipcEventSupported", None),
    "cudaDevAttrNumaConfig": ("deviceNumaConfig", None),
    "cudaDevAttrNumaId": ("deviceNumaId", None),
    "cudaDevAttrMpsEnabled": ("mpsEnabled", None),
    "cudaDevAttrHostNumaId": ("hostNumaId", None),
    "cudaDevAttrGpuPciDeviceId": ("gpuPciDeviceID", None),
    "cudaDevAttrGpuPciSubsystemId": ("gpuPciSubsystemID", None),
    "cudaDevAttrHostNumaMultinodeIpcSupported": ("hostNumaMultinodeIpcSupported", None),
}


def attributes_from_properties(props: dict) -> dict[str, int]:
    """{attribute name: value} for every attribute `props` can answer."""
    attributes = {}
    for attribute, (field, index) in FROM_PROPERTIES.items():
        value = props.get(field)
        if value is None:
            continue
        if index is not None:
            if not isinstance(value, (list, tuple)) or index >= len(value):
                continue
            value = value[index]
        if isinstance(value, bool) or isinstance(value, int):
            attributes[attribute] = int(value)
    return attributes


def attribute_name(value: int) -> str | None:
    """The cudaDeviceAttr name of a number, or None."""
    return _BY_VALUE.get(value)


_BY_VALUE = {value: name for name, value in DEVICE_ATTRIBUTES.items()}
