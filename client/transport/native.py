"""The interposer's C side, seen from Python: (ffi, lib).

Inside a CUDA program the interposer has loaded it already (its embedded
interpreter imported `_rcuda_interposer`).  A Python process that uses the
client directly (tests, `rcuda devices`, benchmarks) loads the same library
as an extension module: its CUDA exports are inert until called, and only
the links (native/link.c) are used.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import sys
from rcuda.binaries import LIB_DIR

log = logging.getLogger(__name__)

MODULE = "_rcuda_interposer"
LIBRARY = LIB_DIR / "librcuda.so"


def load():
    """(ffi, lib), or None when the library is not built (then devices use
    their ZeroMQ sockets only).  Loaded once: sys.modules keeps it."""
    module = sys.modules.get(MODULE)
    if module is None:
        if not LIBRARY.exists():
            return None
        try:
            loader = importlib.machinery.ExtensionFileLoader(MODULE, str(LIBRARY))
            spec = importlib.util.spec_from_file_location(MODULE, LIBRARY, loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
        except ImportError as exc:
            log.warning("cannot load %s (devices will use their ZeroMQ sockets): %s", LIBRARY, exc)
            return None
        sys.modules[MODULE] = module
    return module.ffi, module.lib
