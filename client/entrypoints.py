"""Where C calls into Python: one entry point per CUDA runtime and driver function.

`attach` runs once, when the interposer starts the embedded interpreter.  It
gives every `rcuda_py_<name>` declared by the interposer exactly one Python
body: the implementation in client/runtime/ (a driver function's in
client/driver/, a library's in client/libraries/), or, for functions rcuda
does not implement, one that logs the name once and returns
cudaErrorNotSupported (CUDA_ERROR_NOT_SUPPORTED, the library's own status).
The driver's and the libraries' modules are imported at the first call of
one of their functions, so a program that never calls them does not pay
for their imports.
Here, and only here, exceptions become CUDA statuses: nothing raised in
Python ever crosses into C.  The driver API has no "last error": its
failures are only returned.
"""
from __future__ import annotations

import atexit
import collections
import logging
import os
import sys
import threading
import time

from rcuda import protocol
from rcuda._generated.cuda_driver_api import DRIVER_FUNCTIONS
from rcuda._generated.cudart_api import FUNCTIONS
from rcuda._generated.libraries_api import LIBRARIES, LIBRARY_FUNCTIONS
from rcuda.left_out import by_design
from rcuda.driver_errors import CUresult, DriverError, driver_status
from rcuda.config import ClientConfig, ConfigError
from rcuda.errors import CudaError, RcudaError, TransportError, cudaError, to_cuda_status
from rcuda.library_errors import LibraryError
from rcuda.log import setup_client_logging

from . import interposer
from .driver import dispatch as driver_dispatch
from .libraries import dispatch as library_dispatch
from .libraries import registry as library_registry
from .runtime import core as runtime_core
from .runtime import (arrays, boxes, capture, driver_access, graphs, ipc, library_management, logs,  # noqa: F401 - register
                      managed, memory, notifications, pools, queries, streams, textures)
from .callbacks import in_host_function
from .transport.fast_path import FastPath
from .stats import Stats
from .state import Runtime

log = logging.getLogger(__name__)

READY_TOKEN = 0x72637564  # must match RCUDA_READY_TOKEN in native/interposer.c
NOT_SUPPORTED = int(cudaError.cudaErrorNotSupported)
NOT_PERMITTED = int(cudaError.cudaErrorNotPermitted)
#: "Not yet" from a query: a status, not an error; CUDA does not keep it as the last error.
NOT_READY = int(cudaError.cudaErrorNotReady)

def attach(ffi, lib) -> None:
    try:
        config = ClientConfig.load()
    except ConfigError as exc:  # reported by the first CUDA call, which fails with it
        config = None
        setup_client_logging()
        log.error("%s", exc)
    else:
        setup_client_logging(config.log)
    runtime = Runtime(config)
    runtime.use_fast_path(FastPath(ffi, lib))
    if config is not None and config.stats:
        runtime.stats = Stats()
    runtime.output_sink = lambda text: _write_stdout(ffi, lib, text)
    interposer.bind(ffi, lib, runtime)
    for name, row in FUNCTIONS.items():
        if row["route"] != "python":
            continue
        body = timed_if_asked(name, runtime_core.IMPLEMENTED.get(name), runtime)
        entry = guarded(runtime, name, row["result"], body) if body else not_supported(runtime, name, row["result"])
        ffi.def_extern(name=f"rcuda_py_{name}")(entry)
    attach_driver(ffi, runtime)
    attach_libraries(ffi, runtime)
    attach_launch_slow_path(ffi, runtime)
    attach_last_error_slow_path(ffi, runtime)
    attach_sync_slow_paths(ffi, runtime)
    attach_lifecycle(ffi, lib, runtime)


def guarded(runtime: Runtime, name: str, result: str, body):
    """Run `body`; turn any exception into a status (recorded as the thread's
    last error) or, for functions that return no status, a log line."""
    if result == "cudaError_t":
        def entry(*args):
            if in_host_function():
                return refused_in_host_function(name)
            return status_of(runtime, name, body, *args)
    else:
        def entry(*args):
            try:
                return body(*args)
            except Exception as exc:  # noqa: BLE001 - the C boundary
                runtime.record_error(failed(name, exc))
                return fallback_value(result)
    entry.__name__ = name
    return entry


def status_of(runtime: Runtime, name: str, body, *args) -> int:
    """`body(*args)`'s status, or its exception's; an error is recorded as
    the thread's last error ("not ready" is a status, not an error)."""
    try:
        status = body(*args)
    except Exception as exc:  # noqa: BLE001 - the C boundary
        status = failed(name, exc)
    if status and status != NOT_READY:
        runtime.record_error(status)
    return status


def timed(name: str, body, stats: Stats):
    """RCUDA_STATS=1: count the call and the time the program spent in it."""
    def entry(*args):
        started = time.perf_counter()
        try:
            return body(*args)
        finally:
            stats.call(name, time.perf_counter() - started)
    return entry


def refused_in_host_function(name: str) -> int:
    """CUDA forbids CUDA calls in a host function (cudaLaunchHostFunc); here
    one would deadlock on the stream it is part of."""
    log.error("%s called inside a host function (cudaLaunchHostFunc/cudaStreamAddCallback): CUDA does not "
              "allow CUDA calls there; returning cudaErrorNotPermitted", name)
    return NOT_PERMITTED


def fallback_value(result: str):
    """What a function that returns no status gives back when it fails."""
    if result == "void":
        return None
    if "*" in result:
        return interposer.ffi.NULL
    if result.startswith("struct "):  # cudaCreateChannelDesc's: zeros
        return interposer.ffi.new(result + " *")[0]
    return b"\0" if result == "char" else 0


class _RepeatedErrors:
    """A lost server fails every later call the same way: a program that
    ignores its errors and goes on calling would print a line per call.
    Each error text is logged SHOWN times, then once more saying so; its
    repeats go to the debug level (RCUDA_LOG=debug)."""

    SHOWN = 5

    def __init__(self):
        self._seen: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def error(self, name: str, exc: BaseException) -> None:
        with self._lock:
            self._seen[str(exc)] += 1
            seen = self._seen[str(exc)]
        if seen <= self.SHOWN:
            log.error("%s", _naming(name, exc))
        elif seen == self.SHOWN + 1:
            log.error("%s (again: from now on this error is logged at debug level only)", _naming(name, exc))
        else:
            log.debug("%s", _naming(name, exc))


_repeated = _RepeatedErrors()


def failed(name: str, exc: BaseException) -> int:
    status = to_cuda_status(exc)
    if isinstance(exc, TransportError):
        _repeated.error(name, exc)
    elif isinstance(exc, LibraryError):  # a bad argument the program can check for itself
        log.log(logging.WARNING if "NOT_SUPPORTED" in exc.library_status else logging.DEBUG, "%s",
                _naming(name, exc))
    elif isinstance(exc, CudaError):
        # Statuses the program can check for itself are logged quietly;
        # a server's explanation (e.g. a missing sim kernel) is shown.
        level = logging.WARNING if exc.status in _EXPLAINED else logging.DEBUG
        log.log(level, "%s", _naming(name, exc))
    elif isinstance(exc, DriverError) and exc.result in _CHECKABLE_DRIVER:
        log.debug("%s", _naming(name, exc))  # the status says it all: the program checks for it
    elif isinstance(exc, RcudaError):
        log.error("%s", _naming(name, exc))
    else:
        log.exception("%s: internal error in rcuda (please report it)", name)
    return int(status)


def _naming(name: str, exc: BaseException) -> str:
    """The error's message, led by the call's name unless it starts with it."""
    text = str(exc)
    return text if any(text.startswith(name + sep) for sep in (":", " ", "(")) else f"{name}: {text}"


# Driver statuses that say all there is to say: a missing file, a call
# before cuInit, peer access enabled twice.  Logged at debug level only.
_CHECKABLE_DRIVER = frozenset({
    CUresult.CUDA_ERROR_FILE_NOT_FOUND, CUresult.CUDA_ERROR_NOT_INITIALIZED,
    CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, CUresult.CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,
})

# Errors whose cause the program cannot see: always worth a log line.
_EXPLAINED = frozenset({
    cudaError.cudaErrorInvalidDeviceFunction, cudaError.cudaErrorNoDevice, cudaError.cudaErrorLaunchFailure,
    cudaError.cudaErrorIllegalAddress, cudaError.cudaErrorAssert, cudaError.cudaErrorInvalidKernelImage,
    cudaError.cudaErrorDevicesUnavailable, cudaError.cudaErrorUnknown, cudaError.cudaErrorNotSupported,
})

def not_supported(runtime: Runtime, name: str, result: str):
    def entry(*args):
        report_unsupported(runtime, name, "cudaErrorNotSupported")
        runtime.record_error(NOT_SUPPORTED)
        return NOT_SUPPORTED if result == "cudaError_t" else fallback_value(result)
    entry.__name__ = name
    return entry


def report_unsupported(runtime: Runtime, name: str, status: str) -> None:
    if name not in runtime.unsupported_reported:
        runtime.unsupported_reported.add(name)
        reason = by_design(name)
        if reason is not None:
            log.warning("%s is not supported by rcuda, by design (%s): returning %s", name, reason, status)
        else:
            log.warning("%s is not supported by rcuda yet: returning %s", name, status)


def attach_driver(ffi, runtime: Runtime) -> None:
    """The driver API's entry points: client/driver/'s functions, or
    CUDA_ERROR_NOT_SUPPORTED.  Each finds its implementation at its first
    call (client/driver/dispatch.py)."""
    for name in DRIVER_FUNCTIONS:
        ffi.def_extern(name=f"rcuda_py_{name}")(
            found_at_first_call(name, lambda name=name: driver_guarded(
                runtime, name, timed_if_asked(name, driver_dispatch.implementation(name), runtime))))


def driver_guarded(runtime: Runtime, name: str, body):
    """`body`'s CUresult, or its exception's; without a body, CUDA_ERROR_NOT_SUPPORTED."""
    def entry(*args):
        if body is None:
            report_unsupported(runtime, name, "CUDA_ERROR_NOT_SUPPORTED")
            return int(CUresult.CUDA_ERROR_NOT_SUPPORTED)
        if in_host_function():
            refused_in_host_function(name)
            return int(CUresult.CUDA_ERROR_NOT_PERMITTED)
        try:
            return int(body(*args))
        except Exception as exc:  # noqa: BLE001 - the C boundary
            failed(name, exc)
            return int(driver_status(exc))
    entry.__name__ = name
    return entry


def attach_libraries(ffi, runtime: Runtime) -> None:
    """cuBLAS's, cuFFT's and cuRAND's entry points (client/libraries/), and
    the one entry of the exports with no Python entry point of their own
    (native/library_stubs.c).  Each finds its implementation at its first
    call (client/libraries/dispatch.py)."""
    for name, row in LIBRARY_FUNCTIONS.items():
        if row["python"]:
            ffi.def_extern(name=f"rcuda_py_{name}")(
                found_at_first_call(name, lambda name=name, row=row: library_guarded(
                    runtime, name, row, timed_if_asked(name, library_dispatch.implementation(name, row), runtime))))

    @ffi.def_extern(name="rcuda_py_library_unsupported")
    def unsupported(name):
        report_unsupported(runtime, ffi.string(name).decode(), "the library's \"not supported\" status")


def found_at_first_call(name: str, make_entry):
    """An entry point that makes its real entry, `make_entry()`, at its first
    call (importing the modules that implement it) and calls that from then on."""
    entry = None

    def first_call(*args):
        nonlocal entry
        if entry is None:
            entry = make_entry()
        return entry(*args)

    first_call.__name__ = name
    return first_call


def timed_if_asked(name: str, body, runtime: Runtime):
    """`body`, timed when RCUDA_STATS asks for it (None stays None)."""
    return timed(name, body, runtime.stats) if body and runtime.stats is not None else body


def library_guarded(runtime: Runtime, name: str, row: dict, body):
    """`body`'s status, or its exception's as the library's own status; a
    function of another result type gives its zero value on failure."""
    library_name = row["library"]
    returns_status = row["result"] == LIBRARIES[library_name]["status_type"]
    unsupported = library_registry.status(library_name, LIBRARIES[library_name]["not_supported"])

    def entry(*args):
        if body is None:
            report_unsupported(runtime, name, LIBRARIES[library_name]["not_supported"])
            return unsupported if returns_status else fallback_value(row["result"])
        if in_host_function():
            refused_in_host_function(name)
            return library_registry.library_status(library_name, CudaError(NOT_PERMITTED)) if returns_status \
                else fallback_value(row["result"])
        try:
            result = body(*args)
            return int(result or 0) if returns_status else result
        except Exception as exc:  # noqa: BLE001 - the C boundary
            failed(name, exc)
            return library_registry.library_status(library_name, exc) if returns_status else fallback_value(row["result"])
    entry.__name__ = name
    return entry


def _write_stdout(ffi, lib, text: str) -> None:
    """Device output goes through the program's own C stdout, so it stays in
    order with the program's printf."""
    data = text.encode()
    lib.rcuda_write_stdout(data, len(data))


def attach_launch_slow_path(ffi, runtime: Runtime) -> None:
    """The launches native/launch_fast_path.c hands to Python."""
    def body(host_fun, grid, block, args, shared_mem, stream, per_thread):
        return runtime_core.launch(host_fun, grid, block, args, shared_mem, stream, bool(per_thread))

    if runtime.stats is not None:
        body = timed("cudaLaunchKernel (through Python)", body, runtime.stats)
    ffi.def_extern(name="rcuda_py_launch")(guarded(runtime, "cudaLaunchKernel", "cudaError_t", body))


def attach_last_error_slow_path(ffi, runtime: Runtime) -> None:
    """cudaGetLastError (take=1) and cudaPeekAtLastError (take=0) when C
    cannot answer (native/last_error.c).  They report the last error rather
    than fail: what they return does not become the last error again."""
    names = {0: "cudaPeekAtLastError", 1: "cudaGetLastError"}

    def body(take):
        return runtime.take_last_error() if take else runtime.peek_last_error()

    if runtime.stats is not None:
        body = timed("cudaGetLastError/cudaPeekAtLastError (through Python)", body, runtime.stats)

    @ffi.def_extern(name="rcuda_py_last_error")
    def entry(take):
        try:
            return body(take)
        except Exception as exc:  # noqa: BLE001 - the C boundary
            return failed(names.get(take, "cudaGetLastError"), exc)


def attach_sync_slow_paths(ffi, runtime: Runtime) -> None:
    """What native/sync_fast_path.c leaves to Python of the synchronous calls
    it makes on a device's link: replies with an error or device output, and
    a link that failed."""

    def link_entry(body):
        def entry(ordinal, call, *rest):
            name = ffi.string(call).decode()
            return status_of(runtime, name, lambda: body(runtime.device(ordinal), name, *rest))
        return entry

    def link_failed(device, name, failure, error_number):
        raise device.link.failed_in_c(name, failure, error_number)

    def link_reply(device, name, op, seq, header, size):
        reply = protocol.unpack(ffi.buffer(header, size))
        device.answered(ffi.string(op).decode(), reply)
        return int(cudaError.cudaSuccess)

    ffi.def_extern(name="rcuda_py_link_failed")(link_entry(link_failed))
    ffi.def_extern(name="rcuda_py_link_reply")(link_entry(link_reply))


def attach_lifecycle(ffi, lib, runtime: Runtime) -> None:
    @ffi.def_extern()
    def rcuda_py_start():
        return READY_TOKEN

    @ffi.def_extern()
    def rcuda_py_atexit():
        """Flush and close at the program's exit, once: from C's exit
        handlers, or, in a Python program, from its interpreter's (C's run
        after the interpreter is gone, and skip a closed client)."""
        try:
            runtime.shutdown()
        except Exception:  # noqa: BLE001 - never crash the program's exit
            log.exception("error while flushing at exit")
        sys.stdout.flush()
        if runtime.stats is not None:
            print(runtime.stats.report(), file=sys.stderr, flush=True)
        lib.rcuda_close_client()  # later CUDA calls get CUDA's "shutting down" status

    if lib.rcuda_python_host():
        atexit.register(rcuda_py_atexit)
        os.register_at_fork(after_in_child=runtime.forget_after_fork)  # C's fork handlers leave Python alone

    @ffi.def_extern()
    def rcuda_py_after_fork_child():
        runtime.forget_after_fork()
