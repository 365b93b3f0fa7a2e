"""What a pointer is, from the process's maps: the answer behind
cudaPointerGetAttributes and the driver's cuPointerGetAttribute(s).

The allocation map (device memory, pool blocks), the mirrors (mapped host
memory and managed memory, by either address) and the pinned host ranges
together know every pointer rcuda handed out or registered.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PointerInfo:
    kind: str          # "device", "host" (pinned or mapped), "managed", or "unknown"
    device: object     # the RemoteDevice it belongs to (None for plain pinned memory and unknown pointers)
    host: int          # the address the host reaches it at (0: none)
    device_ptr: int    # the address kernels reach it at (0: none)
    start: int         # the allocation or range holding it
    size: int


def describe(runtime, address: int) -> PointerInfo:
    mirror = runtime.mapped.find(address)
    if mirror is not None:
        host = address if mirror.on_host(address) else mirror.to_host(address)
        return PointerInfo("managed" if mirror.managed else "host", mirror.device, host, mirror.to_device(host),
                           mirror.host if mirror.on_host(address) else mirror.device_ptr, mirror.size)
    allocation = runtime.allocations.find(address)
    if allocation is not None:
        return PointerInfo("device", allocation.device, 0, address, allocation.base, allocation.size)
    pinned = runtime.host_memory.find(address)
    if pinned is not None:
        return PointerInfo("host", None, address, 0, pinned.base, pinned.size)
    return PointerInfo("unknown", None, 0, 0, 0, 0)
