"""Which Python function serves a driver export.  The driver's function
modules are imported at the first driver call a program makes, not in
every program: a runtime-only program never loads them.
"""
from __future__ import annotations

import importlib

from .registry import DRIVER_IMPLEMENTED

#: The modules that register driver functions (each with @driver()).
MODULES = ("core", "contexts", "devices", "functions", "launch", "link", "managed", "memory", "modules", "peers",
           "pointers", "pools", "streams", "vmm")

_loaded = False


def load_modules() -> None:
    """Import every module of MODULES: each registers its functions."""
    global _loaded
    if not _loaded:
        for name in MODULES:
            importlib.import_module(f"{__package__}.{name}")
        _loaded = True


def implementation(name: str):
    """The function registered for driver export `name`, or None."""
    load_modules()
    return DRIVER_IMPLEMENTED.get(name)
