"""The server's `lib` op (server/library_calls.py) against bad input: every
malformed call is refused with a clear error, changes nothing, and the
session's objects go with it."""
from __future__ import annotations

import numpy as np
import pytest

from rcuda.errors import CudaError, ProtocolError
from rcuda.server.backends.sim import SimBackend
from rcuda.server.library_calls import LibraryCalls


@pytest.fixture
def device():
    return SimBackend(devices=1).open_device(0)


def call(calls, device, name, obj, args, answered=True):
    return calls.serve(device, {"call": name, "obj": obj, "args": args}, [], 0, answered)


def test_a_gemm_runs_and_bad_calls_change_nothing(device):
    calls = LibraryCalls()
    assert call(calls, device, "cublasCreate_v2", 1, []) == {"results": []}
    a = device.malloc(4 * 4)
    device.memcpy_htod(a, memoryview(np.arange(4, dtype=np.float32).tobytes()))
    assert call(calls, device, "cublasSdot_v2", 1, [4, a, 1, a, 1, {"out": None, "dtype": "f4"}]) == \
        {"results": [14.0]}
    for name, obj, args, error in [
        ("cublasCreate_v2", 1, [], ProtocolError),                       # the id is taken
        ("cublasCreate_v2", -5, [], ProtocolError),                      # not an id
        ("nope", 1, [], ProtocolError),                                  # not a library call
        ("cublasSdot_v2", 1, [4, a, 1], ProtocolError),                  # too few arguments
        ("cublasSdot_v2", 1, ["x", a, 1, a, 1, {"out": None, "dtype": "f4"}], ProtocolError),
        ("cublasSdot_v2", 1, [4, a, 1, a, 1, {"bogus": 1}], ProtocolError),
        ("cublasSdot_v2", 1, [4, 0x1234, 1, a, 1, {"out": None, "dtype": "f4"}], CudaError),  # not memory
    ]:
        with pytest.raises(error):
            call(calls, device, name, obj, args)
    # an unknown object is the library's own status, a reply rather than a failure
    assert call(calls, device, "cublasSdot_v2", 9, [4, a, 1, a, 1, {"out": None, "dtype": "f4"}])["status"] == \
        "CUBLAS_STATUS_NOT_INITIALIZED"
    assert call(calls, device, "cublasSdot_v2", 1, [4, a, 1, a, 1, {"out": None, "dtype": "f4"}]) == \
        {"results": [14.0]}


def test_a_library_status_sent_without_waiting_becomes_the_next_error(device):
    calls = LibraryCalls()
    call(calls, device, "curandCreateGenerator", 3, [100])
    assert call(calls, device, "curandGenerateNormal", 3, [0, 3, 0.0, 1.0])["status"] == \
        "CURAND_STATUS_LENGTH_NOT_MULTIPLE"
    with pytest.raises(CudaError, match="CURAND_STATUS_LENGTH_NOT_MULTIPLE"):
        call(calls, device, "curandGenerateNormal", 3, [0, 3, 0.0, 1.0], answered=False)


def test_objects_are_freed_with_the_session(device):
    calls = LibraryCalls()
    call(calls, device, "cufftCreate", 1, [])
    call(calls, device, "cublasCreate_v2", 2, [])
    calls.release(device)
    assert call(calls, device, "cufftMakePlanMany64", 1,
                [1, [8], None, 1, 0, None, 1, 0, 0x29, 1])["status"] == "CUFFT_INVALID_PLAN"


def test_curand_tables_belong_to_no_object(device):
    """A table is asked of object 0 and answered whole, as one frame; a
    wrong set is cuRAND's status; a table asked of an object, or without
    expecting the reply, is not a request the client makes."""
    calls = LibraryCalls()
    reply, frames = call(calls, device, "curandGetScrambleConstants32", 0, [])
    assert reply == {"results": []} and len(frames) == 1 and len(frames[0]) == 20000 * 4
    reply, frames = call(calls, device, "curandGetDirectionVectors64", 0, [103])
    assert np.frombuffer(frames[0], np.uint64)[:3].tolist() == [1 << 63, 1 << 62, 1 << 61]
    assert call(calls, device, "curandGetDirectionVectors64", 0, [101])["status"] == "CURAND_STATUS_OUT_OF_RANGE"
    with pytest.raises(ProtocolError):
        call(calls, device, "curandGetScrambleConstants32", 3, [])
    with pytest.raises(ProtocolError):
        call(calls, device, "curandGetScrambleConstants32", 0, [], answered=False)
