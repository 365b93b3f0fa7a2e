"""CUDA status codes, and rcuda's own failures converted to them in one place.

`cudaError` is the runtime's `cudaError_t` with CUDA's names; `error_string`
gives the exact message the real `cudaGetErrorString` returns.  Everything that
can go wrong inside rcuda is an `RcudaError`; `to_cuda_status` turns any
exception into the `cudaError_t` the application sees, so no Python exception
ever crosses into C.

    RcudaError                  .status is a cudaError
    ├── CudaError               a CUDA status reported by a backend or the client
    ├── TransportError          the server cannot be reached (cudaErrorDevicesUnavailable)
    │   ├── ServerTimeout       no reply and no heartbeat within RCUDA_TIMEOUT
    │   └── AuthenticationError the server refused our key, or we have none it accepts
    └── ProtocolError           a malformed or unexpected message
        └── VersionMismatch     client and server speak different protocol versions
"""
from __future__ import annotations

import enum

from rcuda._generated.cuda_errors import ERRORS

cudaError = enum.IntEnum("cudaError", [(name, value) for value, name, _, _ in ERRORS])
cudaError.__doc__ = "cudaError_t, with CUDA 13's names and values."

_MESSAGES = {value: message for value, _, message, _ in ERRORS}
_NAMES = {value: name for value, name, _, _ in ERRORS}

#: Errors after which the context is unusable: every later call returns them.
STICKY = frozenset(cudaError(value) for value, _, _, sticky in ERRORS if sticky)


def error_name(code: int) -> str:
    """`cudaGetErrorName`: the enum's name, or CUDA's text for an unknown code."""
    return _NAMES.get(int(code), "cudaErrorUnknown" if int(code) == 999 else "unrecognized error code")


def error_string(code: int) -> str:
    """`cudaGetErrorString`: CUDA's message for a status."""
    return _MESSAGES.get(int(code), "unrecognized error code")


def is_sticky(code: int) -> bool:
    return code in STICKY


class RcudaError(Exception):
    """Base of everything rcuda raises; `status` is what the application sees."""

    status: cudaError = cudaError.cudaErrorUnknown

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = cudaError(status)

    @property
    def message(self) -> str:
        return str(self)


class CudaError(RcudaError):
    """A CUDA status with an explanation, e.g. from a backend on the server."""

    def __init__(self, status: int, message: str = ""):
        super().__init__(message or error_string(status), status)

    def __reduce__(self):
        return (type(self), (int(self.status), str(self)))


class TransportError(RcudaError):
    """A server could not be reached or went away."""

    status = cudaError.cudaErrorDevicesUnavailable


class ServerTimeout(TransportError):
    """No reply and no sign of life from a server within the timeout."""


class AuthenticationError(TransportError):
    """The CURVE handshake with a server failed (see rcuda/auth.py)."""


class LaneClosed(ConnectionError):
    """The other side closed a lane (rcuda/lane.py), or it broke."""


class ProtocolError(RcudaError):
    """A message that does not follow rcuda's protocol."""

    status = cudaError.cudaErrorUnknown


class VersionMismatch(ProtocolError):
    """Client and server implement different protocol versions."""

    status = cudaError.cudaErrorDevicesUnavailable


def to_cuda_status(exc: BaseException) -> cudaError:
    """The cudaError_t an exception becomes at the C boundary."""
    if isinstance(exc, RcudaError):
        return exc.status
    if isinstance(exc, MemoryError):
        return cudaError.cudaErrorMemoryAllocation
    return cudaError.cudaErrorUnknown
