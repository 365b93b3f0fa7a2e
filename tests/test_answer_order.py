"""The order of a GPU server's answers, on the cupy backend without a GPU
(tests/stand_in_service.py: CuPy stood in for by tests/fake_cuda.py, whose
work runs only once nothing holds it, and the driver by
tests/stand_in_driver.c), over a real lane to the test, which plays the client.

The server answers a request that waits for device work when the work is
done, so answers may overtake each other (a thread waiting on a long stream
holds up no other).  But the client acts on an answer as it arrives: a
download into pinned memory lands its bytes, a host function's marker runs
the function, a finished synchronisation or query lets the program read
that memory.  So an answer must never overtake that of an earlier request
whose work is done by then: on an H100, graphs.cu's host node read the
pinned memory its graph's download had not filled yet (the download,
behind the graph's kernels, was left waiting; the marker after it, sent
once the kernels were done, was answered at once)."""
from __future__ import annotations

import pytest

from stand_in_service import open_lane

NOT_READY = 600
SIZE = 4096


@pytest.fixture
def lane(service):
    """The service's lane, opened, and the client's end."""
    client = open_lane(service)
    yield client
    client.close()
    service._lane.close()
    service._lane = service._peer = None


def send(client, *requests) -> None:
    client.send_all([(request, ()) for request in requests])


def answers(client, count: int) -> list:
    """The next `count` answers: (header, payload bytes), as they arrived."""
    got = []
    for _ in range(count):
        header, frames = client.receive()
        got.append((header, b"".join(bytes(f.buffer) for f in frames)))
    return got


def serve(service) -> None:
    """One turn of the GPU's thread."""
    service._serve_what_arrives()
    service._answer_what_is_ready()


@pytest.fixture
def held_download(service, lane, monkeypatch):
    """A download on the legacy stream behind a memset still running
    (held): served by Python (C out of the way), its answer waiting.  The
    memset filled the source with 7s.  Returns the source's address."""
    monkeypatch.setattr(service.device, "request_server", lambda: None)
    service._spin_seconds = 60.0  # answers polled, never waited for by a thread (the fake would stall it)
    service.gpu.pinned.warm(SIZE)  # the staging the download takes (a new size would wait for all work)
    src = service.device.malloc(SIZE)
    service.gpu.hold("memset")
    send(lane, {"op": "memset", "seq": 0, "ptr": src, "value": 7, "size": SIZE, "stream": 0, "async": True},
         {"op": "dtoh", "seq": 1, "src": src, "size": SIZE, "stream": 0})
    serve(service)
    assert len(service._later) == 1 and not lane.readable()  # the download waits for the memset
    return src


@pytest.mark.parametrize("request_after", [
    {"op": "marker", "seq": 2, "stream": 0},          # a host function's: the function reads the bytes
    {"op": "stream_query", "seq": 2, "stream": 0},    # cudaStreamQuery says done: the program reads them
    {"op": "stream_sync", "seq": 2, "stream": 0},
], ids=["marker", "stream_query", "stream_sync"])
def test_no_answer_overtakes_a_download_done_before_it(service, lane, held_download, request_after):
    service.gpu.release("memset")  # the GPU finishes the memset, and so the download
    send(lane, request_after)      # and then the next request arrives: its work is done at once
    serve(service)
    (first, data), (second, _) = answers(lane, 2)
    assert [first["seq"], second["seq"]] == [1, 2]
    assert first["err"] == 0 and data == b"\x07" * SIZE
    assert second["err"] == 0 and second.get("ready", True) is True
    assert not service._later


def test_work_done_between_two_queries_keeps_the_answers_in_order(service, lane, held_download, monkeypatch):
    """Both wait, the download and then a marker; the GPU finishes between
    the server's look at one and at the other: the marker, done, must not be
    answered while the download, done as well by then, waits."""
    send(lane, {"op": "marker", "seq": 2, "stream": 0})
    serve(service)
    assert len(service._later) == 2 and not lane.readable()
    gpu, query = service.gpu, service.gpu.eventQuery

    def finishing_after_this_look(event):
        status = query(event)
        gpu.release("memset")  # the work ends right after the server's first look
        return status

    monkeypatch.setattr(gpu, "eventQuery", finishing_after_this_look)
    for _ in range(2):
        service._answer_what_is_ready()
    assert [header["seq"] for header, _ in answers(lane, 2)] == [1, 2]


def test_c_answers_nothing_ahead_of_a_download_python_holds(service, lane, driver):
    """A download C took and handed to Python (not done within the spin
    window): what follows, C's kind or not, is answered after it."""
    import numpy as np
    memory = np.full(SIZE, 9, np.uint8)
    service.device.batch_executor.add_range(memory.ctypes.data, memory.size)
    service._spin_seconds = 0.0
    driver.stand_in_events_answer(NOT_READY)
    send(lane, {"op": "dtoh", "seq": 1, "src": memory.ctypes.data, "size": SIZE, "stream": 0})
    serve(service)
    assert len(service._later) == 1 and not lane.readable()  # C's slot, Python's to answer
    driver.stand_in_events_answer(0)  # the GPU is done
    send(lane, {"op": "stream_sync", "seq": 2, "stream": 0}, {"op": "marker", "seq": 3, "stream": 0})
    serve(service)
    got = answers(lane, 3)
    assert [header["seq"] for header, _ in got] == [1, 2, 3]
    assert got[0][1] == b"\x09" * SIZE
