"""CUDA driver API: devices (CUdevice is the runtime's device ordinal).

Every answer comes from what the runtime reports for the same device
(client/device.py's properties and attributes, fetched once when the device
is opened), so the two APIs never disagree.  CUdevice_attribute and
cudaDeviceAttr number the same attributes alike (the runtime's enum is made
from the driver's), so an attribute is looked up by its value; the driver's
attributes the runtime has no name for (IPC and fabric handle types,
multicast, decompression, ...) are capabilities rcuda does not forward and
read 0, but for those DRIVER_ONLY names, which rcuda has (virtual memory
management, stream memory operations).
"""
from __future__ import annotations

import re

from rcuda.device_attributes import attribute_name
from rcuda.driver_errors import CUresult
from rcuda.errors import CudaError, cudaError

from .. import interposer
from ..runtime import notifications as runtime_notifications
from ..runtime import queries as runtime_queries
from ..interposer import out_pointer
from .registry import SUCCESS, driver, from_runtime, require_initialized
from .contexts import check_exec_affinity_type, cu_device, current_context

#: CUdevprop field -> the cudaDeviceAttr it reads (the deprecated struct's fields).
DEVPROP_FIELDS = {
    "maxThreadsPerBlock": "cudaDevAttrMaxThreadsPerBlock",
    "maxThreadsDim": ("cudaDevAttrMaxBlockDimX", "cudaDevAttrMaxBlockDimY", "cudaDevAttrMaxBlockDimZ"),
    "maxGridSize": ("cudaDevAttrMaxGridDimX", "cudaDevAttrMaxGridDimY", "cudaDevAttrMaxGridDimZ"),
    "sharedMemPerBlock": "cudaDevAttrMaxSharedMemoryPerBlock",
    "totalConstantMemory": "cudaDevAttrTotalConstantMemory",
    "SIMDWidth": "cudaDevAttrWarpSize",
    "memPitch": "cudaDevAttrMaxPitch",
    "regsPerBlock": "cudaDevAttrMaxRegistersPerBlock",
    "clockRate": "cudaDevAttrClockRate",
    "textureAlign": "cudaDevAttrTextureAlignment",
}
INT_MAX = 2**31 - 1
#: The runtime's placeholders for driver-only attributes (cudaDevAttrReserved92, ...).
RESERVED = re.compile(r"cudaDevAttrReserved\d+")
#: Driver-only attributes rcuda offers: virtual memory management
#: (client/driver/vmm.py), stream memory operations, 64-bit ones and the NOR
#: condition included, in both APIs (client/driver/stream_memops.py).
DRIVER_ONLY = {"CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED": 1,
               "CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED": 1,  # the same, by its old name
               "CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1": 1,
               "CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1": 1,
               "CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1": 1,
               "CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS": 1,
               "CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR": 1}


@driver()
def cuDeviceGet(device, ordinal):
    out_pointer(device, "device")
    device[0] = cu_device(ordinal).ordinal
    return SUCCESS


@driver()
def cuDeviceGetCount(count):
    require_initialized()
    out_pointer(count, "count")
    count[0] = len(interposer.rt.devices)
    return SUCCESS


@driver()
def cuDeviceGetName(name, len_, dev):
    if name == interposer.ffi.NULL or len_ <= 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cuDeviceGetName: no room for the name (len {len_})")
    text = cu_device(dev).properties.get("name", "").encode()[:len_ - 1] + b"\0"
    interposer.ffi.memmove(name, text, len(text))
    return SUCCESS


@driver("cuDeviceGetUuid_v2", "cuDeviceGetUuid")
def cuDeviceGetUuid_v2(uuid, dev):
    out_pointer(uuid, "uuid")
    value = bytes(cu_device(dev).properties.get("uuid", b""))[:16].ljust(16, b"\0")
    interposer.ffi.memmove(uuid, value, 16)
    return SUCCESS


@driver()
def cuDeviceGetLuid(luid, deviceNodeMask, dev):
    """A LUID matches a device with Direct3D's adapters: Windows only.  On
    Linux a GPU's driver answers CUDA_ERROR_NOT_SUPPORTED for a valid
    device and pointers, as here."""
    out_pointer(luid, "luid")
    out_pointer(deviceNodeMask, "deviceNodeMask")
    cu_device(dev)
    return CUresult.CUDA_ERROR_NOT_SUPPORTED  # what it is on Linux: no log line


@driver()
def cuDeviceTotalMem_v2(bytes_, dev):
    out_pointer(bytes_, "bytes")
    bytes_[0] = cu_device(dev).properties["totalGlobalMem"]
    return SUCCESS


@driver()
def cuDeviceTotalMem(bytes_, dev):
    """CUDA 2.0's, with a 32-bit result: the size, at most 4 GiB - 1."""
    out_pointer(bytes_, "bytes")
    bytes_[0] = min(cu_device(dev).properties["totalGlobalMem"], 2**32 - 1)
    return SUCCESS


@driver()
def cuDeviceGetAttribute(pi, attrib, dev):
    out_pointer(pi, "pi")
    device = cu_device(dev)
    driver_name = interposer.ffi.typeof("CUdevice_attribute").elements.get(attrib)
    if driver_name is None or driver_name == "CU_DEVICE_ATTRIBUTE_MAX":
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cuDeviceGetAttribute: {attrib} is not a CUdevice_attribute")
    name = attribute_name(attrib)
    if driver_name == "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED":
        pi[0] = int(bool(device.properties.get("memoryPoolSupportedHandleTypes", 0) & 1))  # (client/driver/vmm.py)
    elif name is None or RESERVED.fullmatch(name):
        pi[0] = DRIVER_ONLY.get(driver_name, 0)  # driver-only: mostly what rcuda does not forward
    elif name in device.attributes:
        pi[0] = device.attributes[name]
    else:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"cuDeviceGetAttribute: {driver_name} is not known for {device.label}")
    return SUCCESS


@driver()
def cuDeviceComputeCapability(major, minor, dev):
    out_pointer(major, "major")
    out_pointer(minor, "minor")
    attributes = cu_device(dev).attributes
    major[0] = attributes["cudaDevAttrComputeCapabilityMajor"]
    minor[0] = attributes["cudaDevAttrComputeCapabilityMinor"]
    return SUCCESS


@driver()
def cuDeviceGetProperties(prop, dev):
    out_pointer(prop, "prop")
    attributes = cu_device(dev).attributes
    values = {}
    for field, source in DEVPROP_FIELDS.items():
        if isinstance(source, tuple):
            values[field] = [attributes.get(name, 0) for name in source]
        else:
            values[field] = min(attributes.get(source, 0), INT_MAX)  # int fields: memPitch may not fit
    interposer.fill_struct(prop, values)
    return SUCCESS


@driver()
def cuDeviceGetPCIBusId(pciBusId, len_, dev):
    require_initialized()
    return runtime_queries.cudaDeviceGetPCIBusId(pciBusId, len_, dev)


@driver()
def cuDeviceGetByPCIBusId(dev, pciBusId):
    require_initialized()
    out_pointer(pciBusId, "pciBusId")
    return runtime_queries.cudaDeviceGetByPCIBusId(dev, pciBusId)


@driver()
def cuDeviceGetExecAffinitySupport(pi, type_, dev):
    """0: no device rcuda serves limits a context to some of its
    multiprocessors (cuCtxCreate_v3/_v4 with an affinity are refused)."""
    out_pointer(pi, "pi")
    check_exec_affinity_type(type_, "cuDeviceGetExecAffinitySupport")
    cu_device(dev)
    pi[0] = 0
    return SUCCESS


@driver()
def cuDeviceGetHostAtomicCapabilities(capabilities, operations, count, dev):
    """cudaDeviceGetHostAtomicCapabilities: none (CUatomicOperation numbers
    cudaAtomicOperation's values)."""
    require_initialized()
    return from_runtime(runtime_queries.cudaDeviceGetHostAtomicCapabilities(capabilities, operations, count, dev))


@driver()
def cuFlushGPUDirectRDMAWrites(target, scope):
    """cudaDeviceFlushGPUDirectRDMAWrites on the current context's device:
    CUDA_ERROR_NOT_SUPPORTED unless its
    CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS has the host
    bit; then nothing to flush."""
    current_context("cuFlushGPUDirectRDMAWrites")
    return from_runtime(runtime_queries.cudaDeviceFlushGPUDirectRDMAWrites(target, scope))


@driver()
def cuDeviceRegisterAsyncNotification(device, callbackFunc, userData, callback):
    """cudaDeviceRegisterAsyncNotification: kept, never called (the servers'
    drivers' notifications are not forwarded); one registry for both APIs."""
    require_initialized()
    out = interposer.ffi.cast("cudaAsyncCallbackHandle_t *", out_pointer(callback, "callback"))
    return from_runtime(runtime_notifications.cudaDeviceRegisterAsyncNotification(device, callbackFunc, userData,
                                                                                   out))


@driver()
def cuDeviceUnregisterAsyncNotification(device, callback):
    require_initialized()
    return from_runtime(runtime_notifications.cudaDeviceUnregisterAsyncNotification(device, callback))
