"""Stream capture, as far as rcuda has it: the queries, while no stream can
capture (cudaStreamBeginCapture answers cudaErrorNotSupported until rcuda
has CUDA graphs).

Frameworks ask on every allocation whether a stream is capturing (PyTorch's
caching allocator, cudaStreamIsCapturing): the answer, "none", is the
client's own, with no round trip.  A thread's capture interaction mode
(cudaThreadExchangeStreamCaptureMode) is kept as CUDA keeps it, though with
no capture it forbids nothing yet.
"""
from __future__ import annotations

import threading

from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError

from ..interposer import out_pointer, stream_of
from .core import SUCCESS, cuda

NOT_CAPTURING = ENUMS["cudaStreamCaptureStatus"]["cudaStreamCaptureStatusNone"]
CAPTURE_MODES = set(ENUMS["cudaStreamCaptureMode"].values())

_thread = threading.local()


def capture_status(stream_handle, per_thread: bool) -> int:
    """The capture status of the program's stream `stream_handle` (checked: a
    destroyed or unknown stream is an error, as in CUDA)."""
    stream_of(stream_handle, per_thread)
    return NOT_CAPTURING


@cuda(stream_variants=True)
def cudaStreamIsCapturing(stream, pCaptureStatus, per_thread=False):
    out_pointer(pCaptureStatus, "pCaptureStatus")[0] = capture_status(stream, per_thread)
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamGetCaptureInfo(stream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                             numDependencies_out, per_thread=False):
    """Of a stream that is not capturing only the status is defined; the
    other outputs are left as they are, as CUDA leaves them."""
    out_pointer(captureStatus_out, "captureStatus_out")[0] = capture_status(stream, per_thread)
    return SUCCESS


@cuda()
def cudaThreadExchangeStreamCaptureMode(mode):
    """Swap the calling thread's capture interaction mode with *mode."""
    out_pointer(mode, "mode")
    if mode[0] not in CAPTURE_MODES:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaThreadExchangeStreamCaptureMode: mode {mode[0]}")
    previous = getattr(_thread, "mode", ENUMS["cudaStreamCaptureMode"]["cudaStreamCaptureModeGlobal"])
    _thread.mode = int(mode[0])
    mode[0] = previous
    return SUCCESS
