"""Which Python function serves a library export.  The libraries' modules
are imported at a program's first call of any of them: a program that
never calls cuBLAS, cuFFT or cuRAND does not load them.
"""
from __future__ import annotations

import importlib

from .registry import LIBRARY_IMPLEMENTED

#: The modules that register library functions (each with @library()).
MODULES = ("cublas", "cublaslt", "cufft", "cufft_xt", "curand")

_loaded = False


def load_modules() -> None:
    """Import every module of MODULES: each registers its functions."""
    global _loaded
    if not _loaded:
        for name in MODULES:
            importlib.import_module(f"{__package__}.{name}")
        _loaded = True


def implementation(name: str, row: dict):
    """What serves library function `name` (its LIBRARY_FUNCTIONS row): its
    registered implementation, cuBLAS's generic forwarder, or None."""
    load_modules()
    from .cublas import generic
    return LIBRARY_IMPLEMENTED.get(name) or generic(name, row)
