"""Stream attributes (cudaStreamSetAttribute, cudaStreamGetAttribute,
cudaStreamCopyAttributes): the cudaLaunchAttributeIDs CUDA 13 defines for
streams, checked as CUDA checks them and kept with the stream.

The client answers cudaStreamGetAttribute from what it keeps; each setting
also goes to the stream's server (`stream_attr`, in stream order), whose
backend may apply it (cupy: cuStreamSetAttribute) or ignore it (the sim
models neither an L2 cache nor scheduling).  Priority is the stream's own
(cudaStreamGetPriority), clamped to the device's range as CUDA does.

A value travels as plain numbers: the access policy window as [base_ptr,
num_bytes, hitRatio, hitProp, missProp], the domain map as [default_,
remote], the others as one int.
"""
from __future__ import annotations

import math

from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError

ATTRIBUTE_NAMES = {number: name for name, number in ENUMS["cudaLaunchAttributeID"].items()}
ACCESS_PROPERTIES = set(ENUMS["cudaAccessProperty"].values())
#: missProp must be Normal or Streaming (cudaAccessPolicyWindow's documentation).
MISS_PROPERTIES = {ENUMS["cudaAccessProperty"]["cudaAccessPropertyNormal"],
                   ENUMS["cudaAccessProperty"]["cudaAccessPropertyStreaming"]}
SYNC_POLICIES = set(ENUMS["cudaSynchronizationPolicy"].values())
SYNC_DOMAINS = set(ENUMS["cudaLaunchMemSyncDomain"].values())

WINDOW = "cudaLaunchAttributeAccessPolicyWindow"
SYNC_POLICY = "cudaLaunchAttributeSynchronizationPolicy"
PRIORITY = "cudaLaunchAttributePriority"
DOMAIN_MAP = "cudaLaunchAttributeMemSyncDomainMap"
DOMAIN = "cudaLaunchAttributeMemSyncDomain"
NVLINK_CENTRIC = "cudaLaunchAttributeNvlinkUtilCentricScheduling"

#: What a new stream reads: no window, automatic synchronisation, domain 0,
#: remote work in domain 1.  (Priority: the stream's, given at creation.)
DEFAULTS = {
    WINDOW: [0, 0, 0.0, 0, 0],
    SYNC_POLICY: ENUMS["cudaSynchronizationPolicy"]["cudaSyncPolicyAuto"],
    DOMAIN_MAP: [0, 1],
    DOMAIN: 0,
    NVLINK_CENTRIC: 0,
}
#: The attributes CUDA 13 marks "valid for streams".
STREAM_ATTRIBUTES = (*DEFAULTS, PRIORITY)
#: The cudaStreamAttrValue member of each attribute that is one number, and
#: the values it may take (None: any).
NUMBERS = {SYNC_POLICY: ("syncPolicy", SYNC_POLICIES), PRIORITY: ("priority", None),
           DOMAIN: ("memSyncDomain", SYNC_DOMAINS), NVLINK_CENTRIC: ("nvlinkUtilCentricScheduling", {0, 1})}


def attribute_name(attr: int, call: str) -> str:
    name = ATTRIBUTE_NAMES.get(attr)
    if name not in STREAM_ATTRIBUTES:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: {name or f'attribute {attr}'} is not an attribute of streams")
    return name


def read(name: str, value, ffi, call: str, window_limit: int):
    """The checked value of attribute `name` in the program's
    cudaStreamAttrValue `value`."""
    if name == WINDOW:
        w = value.accessPolicyWindow
        fields = [int(ffi.cast("uintptr_t", w.base_ptr)), w.num_bytes, w.hitRatio, w.hitProp, w.missProp]
        if w.num_bytes > window_limit:
            _invalid(call, f"the window's {w.num_bytes} bytes exceed the device's accessPolicyMaxWindowSize "
                           f"({window_limit})")
        if not (0.0 <= w.hitRatio <= 1.0) or math.isnan(w.hitRatio):
            _invalid(call, f"hitRatio {w.hitRatio} is not between 0 and 1")
        if w.hitProp not in ACCESS_PROPERTIES or w.missProp not in MISS_PROPERTIES:
            _invalid(call, f"hitProp {w.hitProp} / missProp {w.missProp}: missProp must be Normal or Streaming")
        return fields
    if name == DOMAIN_MAP:
        return [value.memSyncDomainMap.default_, value.memSyncDomainMap.remote]
    field, allowed = NUMBERS[name]
    number = getattr(value, field)
    if allowed is not None and number not in allowed:
        _invalid(call, f"{name} {number} is not one of {sorted(allowed)}")
    return number


def write(name: str, stored, value, ffi) -> None:
    """Attribute `name`'s `stored` value into the program's cudaStreamAttrValue."""
    ffi.memmove(value, bytes(ffi.sizeof(value[0])), ffi.sizeof(value[0]))
    if name == WINDOW:
        w = value.accessPolicyWindow
        w.base_ptr = ffi.cast("void *", stored[0])
        w.num_bytes, w.hitRatio, w.hitProp, w.missProp = stored[1:]
    elif name == DOMAIN_MAP:
        value.memSyncDomainMap.default_, value.memSyncDomainMap.remote = stored
    else:
        setattr(value, NUMBERS[name][0], stored)


def _invalid(call: str, why: str):
    raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {why}")
