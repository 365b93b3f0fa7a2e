"""Every backend keeps the interface of server/backends/base.py: a public
method a backend's Device (or Backend) overrides takes the same parameters,
with the same kinds and defaults, as the base class's, because the device
service calls them one way for every backend.  Runs without a GPU or CuPy:
cupy_backend imports CuPy only when a backend is created.

(A GPU run found CupyDevice.vmm_create without `shareable`: every
cuMemCreate, and every page-locked block a kernel was given, failed there
with a TypeError the sim never showed.)"""
from __future__ import annotations

import inspect

import pytest

from rcuda.server.backends import base, cupy_backend, sim

PAIRS = [(sim.SimDevice, base.Device), (cupy_backend.CupyDevice, base.Device),
         (sim.SimBackend, base.Backend), (cupy_backend.CupyBackend, base.Backend)]


def _shape(function) -> list[tuple[str, object, object]]:
    """What a caller relies on: each parameter's name, kind and default."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def _overrides(cls, interface) -> list[str]:
    """The public methods `cls` (or a class between it and `interface`) defines again."""
    names = set()
    for klass in cls.__mro__[:cls.__mro__.index(interface)]:
        names.update(name for name, member in vars(klass).items()
                     if not name.startswith("_") and callable(member) and callable(getattr(interface, name, None)))
    return sorted(names)


@pytest.mark.parametrize("cls, interface", PAIRS, ids=lambda c: c.__name__)
def test_overrides_keep_the_base_signature(cls, interface):
    overrides = _overrides(cls, interface)
    assert overrides, f"{cls.__name__} overrides nothing of {interface.__name__}?"
    differing = [f"{name}{inspect.signature(getattr(cls, name))} is not "
                 f"{interface.__name__}.{name}{inspect.signature(getattr(interface, name))}"
                 for name in overrides if _shape(getattr(cls, name)) != _shape(getattr(interface, name))]
    assert not differing, "\n".join(differing)
