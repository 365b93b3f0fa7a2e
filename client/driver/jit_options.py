"""The JIT options of cuModuleLoadDataEx and cuLinkCreate (CUjit_option).

What comes back to the program is honoured: the info and error logs (the
server's JIT compiler's, or the sim's checker's, written into the program's
buffers with their sizes written back) and the wall time.  The rest tune
the compiler (registers, optimisation level, target, cache mode...): they
are accepted and not forwarded, as the driver itself may ignore them for an
image that needs no compiling.
"""
from __future__ import annotations

import time

from rcuda.errors import CudaError, cudaError

#: Option values the driver's JIT reads at most; bounds a bad `numOptions`.
MAX_OPTIONS = 64


class JitOptions:
    """The options one call was given, and where its results go."""

    def __init__(self, ffi, lib, count: int, options, values, what: str):
        if count and (options == ffi.NULL or values == ffi.NULL):
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: {count} options, but options or "
                                                             f"optionValues is NULL")
        if not 0 <= count <= MAX_OPTIONS:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{what}: {count} options")
        self._ffi, self._values = ffi, values
        self._started = time.perf_counter()
        self._slots = {int(options[i]): i for i in range(count)}  # option -> its index in values
        self._info = self._log(lib.CU_JIT_INFO_LOG_BUFFER, lib.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
        self._error = self._log(lib.CU_JIT_ERROR_LOG_BUFFER, lib.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
        self._wall_time = self._slots.get(lib.CU_JIT_WALL_TIME)

    def _log(self, buffer_option: int, size_option: int):
        """(the buffer, its size's slot) of a log the program asked for, or None."""
        if buffer_option not in self._slots or size_option not in self._slots:
            return None
        buffer = self._values[self._slots[buffer_option]]
        return (buffer, self._slots[size_option]) if buffer != self._ffi.NULL else None

    def report(self, info: str = "", error: str = "") -> None:
        """Write the logs and the wall time into the program's option values."""
        for log, text in ((self._info, info), (self._error, error)):
            if log is not None:
                buffer, slot = log
                size = int(self._ffi.cast("uintptr_t", self._values[slot]))
                data = text.encode()[:max(size - 1, 0)]
                if size:
                    self._ffi.memmove(buffer, data + b"\0", len(data) + 1)
                self._values[slot] = self._ffi.cast("void *", len(data) + 1 if size else 0)  # bytes filled
        if self._wall_time is not None:
            # A float, in milliseconds, over the option's value.
            self._ffi.cast("float *", self._values + self._wall_time)[0] = (time.perf_counter() - self._started) * 1000
