"""What rcuda leaves out by design, and why: the program's one warning
for such a function says so (client/entrypoints.py), and `rcuda coverage`
counts them apart (rcuda/coverage.py)."""
from __future__ import annotations

import re

#: Graphics and external-resource interop: left out by design.  A remote GPU
#: shares no memory with this machine's OpenGL, EGL or VDPAU, and external
#: memory and semaphores are handles (file descriptors, NvSci objects) of the
#: GPU's own machine, as is the dma-buf file descriptor of a range of device
#: memory (cuMemGetHandleForAddressRange, for another device's DMA).  They
#: answer cudaErrorNotSupported / CUDA_ERROR_NOT_SUPPORTED.
INTEROP = re.compile(r"Graphics|^cu(da)?(GL|EGL|VDPAU)|External(Memory|Semaphore)|EGLSync|NvSci"
                     r"|^cuMemGetHandleForAddressRange")
INTEROP_REASON = ("graphics and external-resource interop: a remote GPU shares no memory or handles with this "
                  "machine's graphics or devices")


def by_design(name: str) -> str | None:
    """Why a CUDA function rcuda leaves out is left out by design, or None."""
    return INTEROP_REASON if INTEROP.search(name) else None
