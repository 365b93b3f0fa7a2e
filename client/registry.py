"""The decorators that register Python implementations of exported C
functions by name: the runtime's `cuda` (client/runtime/core.py), the
driver's `driver` (client/driver/registry.py), the libraries' `library`
(client/libraries/registry.py) are each a `registrar` over their table of
exports.  A name that is not an export of that table is an error at import.
`importer` loads the modules that register an API's functions, once.
"""
from __future__ import annotations

import functools
import importlib

PER_THREAD_SUFFIXES = ("_ptsz", "_ptds")


def registrar(functions: dict, registry: dict, what: str):
    """The decorator that registers implementations of `functions`' names in
    `registry`: `cuda` for the runtime, client/driver/registry.py's `driver`."""

    def decorator(*names, stream_variants: bool = False):
        """Register an implementation under its own name (or `names`).  With
        `stream_variants`, the `_ptsz`/`_ptds` entry points that programs built
        with `--default-stream per-thread` call are registered too, with
        per_thread=True: for them stream 0 is the thread's default stream."""

        def register(fn):
            for name in names or (fn.__name__,):
                if name not in functions:
                    raise NameError(f"{name} is not a {what}")
                registry[name] = fn
                if stream_variants:
                    variants = [name + s for s in PER_THREAD_SUFFIXES if name + s in functions]
                    if not variants:
                        raise NameError(f"{name} has no _ptsz/_ptds variant")
                    for variant in variants:
                        registry[variant] = functools.partial(fn, per_thread=True)
            return fn

        return register

    return decorator


def importer(package: str, modules: tuple[str, ...]):
    """A function that imports `package`'s `modules`, each of which
    registers its functions, at its first call (client/driver/dispatch.py,
    client/libraries/dispatch.py: those load at a program's first call of
    one of theirs)."""

    @functools.cache
    def load_modules() -> None:
        for name in modules:
            importlib.import_module(f"{package}.{name}")

    return load_modules
