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


def _linear(ptr: int, pitch: int, rows: int) -> dict:
    return {"ptr": ptr, "pitch": pitch, "rows": rows}


@pytest.mark.parametrize("op", ["memset3d", "dtod3d", "dtoh3d", "htod3d"])
def test_empty_boxes_with_huge_heights_are_refused_at_once(session, op):
    """Width 0 and 2**62 rows: the 2-D ops these replaced looped over every
    row (found by the fuzzer as a session that stopped answering)."""
    ptr = session.call({"op": "malloc", "size": 4096})["ptr"]
    started = time.monotonic()
    place = _linear(ptr, 0, HUGE)
    fields = {"dst": place, "src": place, "value": 1}
    reply = session.call({"op": op, "extent": [0, HUGE, 1], "stream": 0,
                          **{k: v for k, v in fields.items() if k in _fields(op)}})
    assert reply["err"] != 0 and "empty extent" in reply["msg"], reply
    assert session.call({"op": "mem_info"})["err"] == 0
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("op", ["memset3d", "dtod3d"])
def test_boxes_beyond_their_allocation_fail_before_the_first_row(session, op):
    ptr = session.call({"op": "malloc", "size": 4096})["ptr"]
    assert session.call({"op": "memset", "ptr": ptr, "value": 0, "size": 4096, "stream": 0})["err"] == 0
    started = time.monotonic()
    place = _linear(ptr, 1, 2**39)
    fields = {"dst": place, "src": place, "value": 1}
    reply = session.call({"op": op, "extent": [1, 2**39, 1], "stream": 0,
                          **{k: v for k, v in fields.items() if k in _fields(op)}})
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
