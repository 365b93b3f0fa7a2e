"""Which Python function serves a driver export.  The driver's function
modules are imported at the first driver call a program makes, not in
every program: a runtime-only program never loads them.
"""
from __future__ import annotations

from ..registry import importer
from .registry import DRIVER_IMPLEMENTED

#: The modules that register driver functions (each with @driver()).
MODULES = ("arrays", "core", "contexts", "devices", "functions", "graphs", "launch", "legacy_launch", "link",
           "managed", "memory", "modules", "peers", "pointers", "pools", "stream_memops", "streams", "textures",
           "tensor_maps", "texture_references", "vmm")

load_modules = importer(__package__, MODULES)


def implementation(name: str):
    """The function registered for driver export `name`, or None."""
    load_modules()
    return DRIVER_IMPLEMENTED.get(name)
