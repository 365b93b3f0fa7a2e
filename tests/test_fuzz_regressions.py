"""What the long fuzz run (benchmarks/fuzz.py) found, kept from coming back."""
from __future__ import annotations

import time

import pytest

from auth_helpers import KeyedSession
from rcuda.errors import cudaError

HUGE = 2**62


@pytest.fixture
def session(sim_server):
    session = KeyedSession(sim_server.address, None)
    yield session
    session.close()


@pytest.mark.parametrize("request_", [
    {"op": "memset2d", "pitch": 0, "value": 1, "width": 0, "height": HUGE, "stream": 0},
    {"op": "dtod2d", "dpitch": 0, "spitch": 0, "width": 0, "height": HUGE, "stream": 0},
    {"op": "dtoh2d", "spitch": 0, "width": 0, "height": HUGE, "stream": 0},
    {"op": "htod2d", "dpitch": 0, "width": 0, "height": HUGE, "stream": 0},
])
def test_empty_2d_rectangles_with_huge_heights_return_at_once(session, request_):
    """Width 0 and 2**62 rows: the GPU thread looped over every row (found
    by the fuzzer as a session that stopped answering)."""
    ptr = session.call({"op": "malloc", "size": 4096})["ptr"]
    started = time.monotonic()
    fields = {"ptr": ptr, "dst": ptr, "src": ptr}
    reply = session.call({**{k: v for k, v in fields.items() if k in _fields(request_["op"])}, **request_})
    assert reply["err"] == 0, reply
    assert session.call({"op": "mem_info"})["err"] == 0
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("request_", [
    {"op": "memset2d", "pitch": 1, "value": 1, "width": 1, "height": 2**39, "stream": 0},
    {"op": "dtod2d", "dpitch": 1, "spitch": 1, "width": 1, "height": 2**39, "stream": 0},
])
def test_2d_requests_beyond_their_allocation_fail_before_the_first_row(session, request_):
    ptr = session.call({"op": "malloc", "size": 4096})["ptr"]
    assert session.call({"op": "memset", "ptr": ptr, "value": 0, "size": 4096, "stream": 0})["err"] == 0
    started = time.monotonic()
    reply = session.call({**{k: ptr for k in ("ptr", "dst", "src") if k in _fields(request_["op"])}, **request_})
    assert reply["err"] == int(cudaError.cudaErrorInvalidValue), reply
    assert time.monotonic() - started < 10
    # Refused as a whole: not one row was written.
    session.send({"op": "dtoh", "src": ptr, "size": 4096, "stream": 0})
    assert session.gpu.poll(20000)
    assert b"".join(session.gpu.recv_multipart()[1:]) == bytes(4096)


def _fields(op: str) -> set:
    from rcuda import protocol
    return set(protocol.OPS[op])


@pytest.mark.parametrize("value", [None, "x", {"a": 1}, 1.5])
def test_stream_attr_with_a_value_of_another_type_is_refused(session, value):
    """A field that may be an int or a list: describing the wrong type in
    the error reply raised inside the checker (found by the fuzzer)."""
    reply = session.call({"op": "stream_attr", "stream": 0, "attr": "cudaLaunchAttributePriority", "value": value})
    assert reply["err"] != 0 and "must be int or list or tuple" in reply["msg"], reply
    assert session.call({"op": "stream_attr", "stream": 0, "attr": "cudaLaunchAttributePriority",
                         "value": -1})["err"] == 0
