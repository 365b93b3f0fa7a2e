"""Which Python function serves a library export.  The libraries' modules
are imported at a program's first call of any of them: a program that
never calls cuBLAS, cuFFT or cuRAND does not load them.
"""
from __future__ import annotations

from ..registry import importer
from .registry import LIBRARY_IMPLEMENTED

#: The modules that register library functions (each with @library()).
MODULES = ("cublas", "cublaslt", "cufft", "cufft_xt", "curand")

load_modules = importer(__package__, MODULES)


def implementation(name: str, row: dict):
    """What serves library function `name` (its LIBRARY_FUNCTIONS row): its
    registered implementation, cuBLAS's generic forwarder, or None."""
    load_modules()
    from .cublas import generic
    return LIBRARY_IMPLEMENTED.get(name) or generic(name, row)
