"""CUDA driver API: peer access between devices (cuDeviceCanAccessPeer,
cuDeviceGetP2PAttribute, cuDeviceGetP2PAtomicCapabilities,
cuCtxEnablePeerAccess, cuCtxDisablePeerAccess).

The runtime's peer access (client/runtime/memory.py, client/transport/peer.py)
behind the driver's names.  CUdevice_P2PAttribute numbers the
cudaDeviceP2PAttr values alike.  What differs from a local GPU: peer access
is the device's, not the context's: enabling it from a created context
enables it for every context of that device (as cudaDeviceEnablePeerAccess
does), and peer copies (cuMemcpyPeer, client/driver/memory.py) work with or
without it.
"""
from __future__ import annotations

from rcuda.driver_errors import CUresult, DriverError

from .. import interposer
from ..runtime import memory as runtime_memory
from ..runtime import queries as runtime_queries
from .registry import driver, from_runtime, require_initialized
from .contexts import contexts, current_context


@driver()
def cuDeviceCanAccessPeer(canAccessPeer, dev, peerDev):
    require_initialized()
    return from_runtime(runtime_memory.cudaDeviceCanAccessPeer(canAccessPeer, dev, peerDev))


@driver()
def cuDeviceGetP2PAttribute(value, attrib, srcDevice, dstDevice):
    """A device with itself is CUDA_ERROR_INVALID_DEVICE, as on a GPU."""
    require_initialized()
    return from_runtime(runtime_memory.cudaDeviceGetP2PAttribute(value, attrib, srcDevice, dstDevice))


@driver()
def cuDeviceGetP2PAtomicCapabilities(capabilities, operations, count, srcDevice, dstDevice):
    """cudaDeviceGetP2PAtomicCapabilities: the link's native atomics, as
    cuDeviceGetP2PAttribute reads them (none on the sim); a device with
    itself is CUDA_ERROR_INVALID_DEVICE."""
    require_initialized()
    return from_runtime(runtime_queries.cudaDeviceGetP2PAtomicCapabilities(capabilities, operations, count,
                                                                           srcDevice, dstDevice))


def _peer_context(peerContext, call: str):
    """(the current context, the peer context); CUDA_ERROR_INVALID_CONTEXT
    without a current context, for a bad handle, or for the current context itself."""
    current = current_context(call)
    peer = contexts().get(interposer.address(peerContext), call)
    if peer is current:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT, f"{call}: the peer context is the current context")
    return current, peer


@driver()
def cuCtxEnablePeerAccess(peerContext, Flags):
    """A peer context on the current context's own device is
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED (a device is not its own peer)."""
    current, peer = _peer_context(peerContext, "cuCtxEnablePeerAccess")
    if Flags != 0:
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE, f"cuCtxEnablePeerAccess: Flags must be 0, not {Flags}")
    if peer.ordinal == current.ordinal:
        raise DriverError(CUresult.CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
                          f"cuCtxEnablePeerAccess: both contexts are on device {peer.ordinal}")
    return from_runtime(runtime_memory.cudaDeviceEnablePeerAccess(peer.ordinal, 0))


@driver()
def cuCtxDisablePeerAccess(peerContext):
    _, peer = _peer_context(peerContext, "cuCtxDisablePeerAccess")
    return from_runtime(runtime_memory.cudaDeviceDisablePeerAccess(peer.ordinal))
