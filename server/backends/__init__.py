"""Backends: where a server's GPUs come from.

`cupy` drives real GPUs; `sim` simulates them on the CPU with Python kernels;
`auto` takes real GPUs when there are any.
"""
from __future__ import annotations

import logging

from .base import Backend

log = logging.getLogger(__name__)

BACKENDS = ("auto", "cupy", "sim")


def create_backend(name: str, devices: int | None, kernel_files=(), memory_bytes: int | None = None,
                   identity: str = "") -> Backend:
    """The backend called `name`, serving `devices` GPUs (None: the
    backend's default) with at most `memory_bytes` per GPU.  `identity`
    names the server (sim: makes its GPUs' UUIDs unique)."""
    if name == "auto":
        name, reason = _auto_choice()
        log.info("backend auto: using %s (%s)", name, reason)
    if name == "cupy":
        from .cupy_backend import CupyBackend
        if kernel_files:
            log.warning("the cupy backend runs the programs' own GPU code: sim kernel files %s are not used",
                        ", ".join(map(str, kernel_files)))
        return CupyBackend(devices, memory_bytes=memory_bytes)
    if name == "sim":
        from .sim import SimBackend
        return SimBackend(devices, kernel_files, memory_bytes=memory_bytes, identity=identity)
    raise ValueError(f"unknown backend {name!r}: choose one of {', '.join(BACKENDS)}")


def _auto_choice() -> tuple[str, str]:
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken CUDA install
        return "sim", f"cupy cannot be imported: {type(exc).__name__}: {exc}"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no driver, no device, ...
        return "sim", f"cupy finds no usable GPU: {exc}"
    if count == 0:
        return "sim", "cupy sees no GPU"
    return "cupy", f"{count} GPU(s) found"
