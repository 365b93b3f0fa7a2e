"""Small synchronous requests served by C on a GPU server
(native/served_requests.c): a session's GPU thread (DeviceService) on the
cupy backend, CuPy stood in for by tests/fake_cuda.py and the driver by
tests/stand_in_driver.c (device memory is host memory), a real lane
(a TCP connection on loopback) between it and the test, which plays the client.

C answers 4-byte and 64 KiB copies both ways and synchronisations itself,
in order, from the socket or from what Python read ahead; hands Python a
request whose work is not done yet, one the driver refused, one after
which the device printed something, and every message that is not its
kind or not well formed; and stays out while an error waits to be told
or Python holds an answer."""
from __future__ import annotations

import ctypes
import os
import socket
import tempfile

import numpy as np
import pytest

from rcuda import protocol
from rcuda.errors import cudaError
from rcuda.lane import Lane
from rcuda.server.backends import cuda_batches

from stand_in_service import DTOH, EVENT_RECORD, HTOD, WAIT, calls, open_lane

NOT_READY, ILLEGAL_ADDRESS = 600, 700


@pytest.fixture
def lane(service):
    """The service's lane, opened, and the client's end."""
    client = open_lane(service)
    yield client
    client.close()
    service._lane.close()
    service._lane = service._peer = None


@pytest.fixture
def memory(service):
    """4 MiB of 'device memory' (host memory: the stand-in's), one of the
    session's allocations as far as C is concerned."""
    buffer = np.arange(4 << 20, dtype=np.uint32).view(np.uint8)[:4 << 20].copy()
    service.device.batch_executor.add_range(buffer.ctypes.data, buffer.size)
    return buffer


def send(client: Lane, *requests) -> None:
    """Requests in one write, as a client sends a batch and then its call."""
    client.send_all([request if isinstance(request, tuple) else (request, ()) for request in requests])


def serve(service) -> None:
    service._serve_what_arrives()


def reply(client: Lane):
    header, frames = client.receive()
    return header, [bytes(f.buffer) for f in frames]


def test_a_small_download_is_served_by_c(service, lane, memory, driver):
    send(lane, {"op": "dtoh", "seq": 7, "src": memory.ctypes.data + 8, "size": 4, "stream": 0})
    serve(service)
    assert reply(lane) == ({"seq": 7, "err": 0}, [bytes(memory[8:12])])
    assert [(c.kind, c.src, c.size) for c in calls(driver)][:1] == [(DTOH, memory.ctypes.data + 8, 4)]
    assert service.usage.calls == 1 and service.usage.bytes_from_device == 4
    assert not service._later


def test_uploads_and_downloads_up_to_64_kib_both_ways(service, lane, memory, driver):
    data = os.urandom(64 << 10)
    at = memory.ctypes.data + 4096
    send(lane, ({"op": "htod", "seq": 1, "dst": at, "size": len(data), "stream": 0}, [data]),
         {"op": "dtoh", "seq": 2, "src": at, "size": len(data), "stream": 0})
    serve(service)
    assert reply(lane) == ({"seq": 1, "err": 0}, [])
    assert reply(lane) == ({"seq": 2, "err": 0}, [data])
    assert bytes(memory[4096:4096 + len(data)]) == data
    kinds = [c.kind for c in calls(driver)]
    assert kinds.count(HTOD) == 1 and kinds.count(DTOH) == 1
    assert service.usage.bytes_to_device == len(data) and service.usage.calls == 2


def test_synchronisations_wait_for_every_stream_or_for_one(service, lane, driver):
    service._handlers["stream_create"]({"stream": 9, "flags": 0, "priority": 0}, [])
    stream = service.device._streams[9]
    send(lane, {"op": "sync", "seq": 3}, {"op": "stream_sync", "seq": 4, "stream": 9})
    serve(service)
    assert reply(lane)[0] == {"seq": 3, "err": 0}
    assert reply(lane)[0] == {"seq": 4, "err": 0}
    log = [(c.kind, c.stream) for c in calls(driver)]
    assert service.usage.calls == 2
    # The device's: an event on each of the session's streams, each waited
    # for by C's own stream, then the slot's event there; the stream's: the
    # slot's event on that stream.
    recorded = {stream for kind, stream in log[:-1] if kind == EVENT_RECORD}
    assert {None, stream} <= recorded
    assert sum(kind == WAIT for kind, _ in log) == len(recorded) - 1
    assert log[-1] == (EVENT_RECORD, stream)


def test_an_event_is_waited_for_on_a_stream_of_c_s_own(service, lane, driver):
    """cudaEventSynchronize, sent by the client's Python (op after the
    fields): C waits for the program's event on its own stream, so the
    program may destroy the event meanwhile; an unknown event is Python's."""
    service._handlers["event_create"]({"event": 4, "flags": 0}, [])
    event = service.device._events[4]
    lane.send({"event": 4, "op": "event_sync", "seq": 11})
    serve(service)
    assert reply(lane)[0] == {"seq": 11, "err": 0}
    waits = [c for c in calls(driver) if c.kind == WAIT]
    assert len(waits) == 1 and waits[0].function == event and waits[0].stream not in (None, event)
    assert calls(driver)[-1].kind == EVENT_RECORD and calls(driver)[-1].stream == waits[0].stream
    lane.send({"event": 5, "op": "event_sync", "seq": 12})
    serve(service)
    header, _ = reply(lane)
    assert header["seq"] == 12 and header["err"] == cudaError.cudaErrorInvalidResourceHandle
    assert len([c for c in calls(driver) if c.kind == WAIT]) == 1


def test_memory_info_is_answered_by_c_unless_a_limit_applies(service, lane, driver, monkeypatch):
    total = service.device.memory_total()
    driver.stand_in_memory(ctypes.c_size_t(1 << 20), ctypes.c_size_t(total))
    monkeypatch.setattr(service.device, "mem_get_info", lambda: (7, 8))  # Python's answer, told apart
    lane.send({"op": "mem_info", "seq": 21})
    serve(service)
    assert reply(lane)[0] == {"seq": 21, "err": 0, "free": 1 << 20, "total": total}
    # The driver reports more than the session may have: --memory-limit, which Python applies.
    driver.stand_in_memory(ctypes.c_size_t(1 << 20), ctypes.c_size_t(total + 1))
    lane.send({"op": "mem_info", "seq": 22})
    serve(service)
    assert reply(lane)[0] == {"seq": 22, "err": 0, "free": 7, "total": 8}


def test_what_python_read_ahead_is_served_from_its_buffer(service, lane, memory, driver):
    """A request Python serves followed in the same write by a download:
    Python's read takes in the download too, and C takes it from there."""
    at = memory.ctypes.data
    send(lane, {"op": "stream_query", "seq": 5, "stream": 0}, {"op": "dtoh", "seq": 6, "src": at, "size": 4, "stream": 0})
    serve(service)
    first, _ = reply(lane)
    assert first["seq"] == 5 and first["err"] == 0 and "ready" in first
    assert reply(lane) == ({"seq": 6, "err": 0}, [bytes(memory[:4])])
    assert sum(c.kind == DTOH for c in calls(driver)) == 1
    assert service._lane.read_ahead == b""


def test_requests_c_leaves_are_python_s_and_keep_their_order(service, lane, memory, driver):
    at = memory.ctypes.data
    send(lane, {"op": "dtoh", "seq": 1, "src": at, "size": 4, "stream": 0},
         {"op": "dtoh", "seq": 2, "src": 0x9999_0000_0000, "size": 4, "stream": 0},  # no allocation of C's
         {"op": "dtoh", "seq": 3, "src": at, "size": 4, "stream": 77},  # no such stream
         {"op": "stream_query", "seq": 4, "stream": 0},
         {"op": "dtoh", "seq": 5, "src": at, "size": 4, "stream": 0})
    for _ in range(5):
        serve(service)
    answers = [reply(lane)[0] for _ in range(5)]
    assert [a["seq"] for a in answers] == [1, 2, 3, 4, 5]
    assert answers[0]["err"] == 0 and answers[4]["err"] == 0
    assert answers[1]["err"] == cudaError.cudaErrorInvalidValue
    assert answers[2]["err"] == cudaError.cudaErrorInvalidResourceHandle and "unknown stream 77" in answers[2]["msg"]
    assert answers[3]["err"] == 0 and answers[3]["ready"] is True
    assert sum(c.kind == DTOH for c in calls(driver)) == 2


def test_after_answering_c_waits_awake_for_the_next_request(service, lane, memory, driver):
    """A program's synchronous calls one after the other: C answers the
    first, the client sends the second on reading the answer, and C,
    waiting awake, serves it in the same call; the third (a query, which
    is Python's) ends C's turn and Python serves it."""
    import threading
    from rcuda.lane import SpinPolicy
    service._spin = SpinPolicy(30.0)  # the bound, were the second never to come
    at = memory.ctypes.data
    answers = []

    def program():
        send(lane, {"op": "dtoh", "seq": 1, "src": at, "size": 4, "stream": 0})
        answers.append(reply(lane))
        send(lane, {"op": "dtoh", "seq": 2, "src": at + 4, "size": 4, "stream": 0})
        answers.append(reply(lane))
        send(lane, {"op": "stream_query", "seq": 3, "stream": 0})
        answers.append(reply(lane))
        lane.sock.shutdown(socket.SHUT_WR)  # the program's end: no more waiting awake for it

    client = threading.Thread(target=program)
    client.start()
    assert service._lane.wait_readable(30.0)
    service._serve_what_arrives()  # one turn of the GPU thread
    client.join(timeout=30)
    assert [header["seq"] for header, _ in answers] == [1, 2, 3]
    assert answers[1][1] == [bytes(memory[4:8])] and answers[2][0]["ready"] is True
    assert sum(c.kind == DTOH for c in calls(driver)) == 2


def test_work_not_done_in_the_spin_window_is_answered_when_it_is(service, lane, memory, driver):
    service._spin_seconds = 0.0
    driver.stand_in_events_answer(NOT_READY)
    at = memory.ctypes.data + 64
    send(lane, {"op": "dtoh", "seq": 8, "src": at, "size": 8, "stream": 0})
    serve(service)
    assert len(service._later) == 1 and not lane.readable()
    copied = bytes(memory[64:72])  # (the stand-in copies when the copy is issued)
    memory[64:72] = 0xAB
    service._answer_what_is_ready()
    assert len(service._later) == 1  # still not done
    driver.stand_in_events_answer(0)
    service._answer_what_is_ready()
    header, frames = reply(lane)
    assert header == {"seq": 8, "err": 0} and frames == [copied]  # from the slot's buffer
    assert not service._later


def test_slots_outlive_a_stop_while_a_request_is_pending(service, lane, memory, driver):
    """The device's close frees the slots, but not while one is Python's:
    its answer still comes, with the bytes the copy read."""
    service._spin_seconds = 0.0
    driver.stand_in_events_answer(NOT_READY)
    send(lane, {"op": "dtoh", "seq": 9, "src": memory.ctypes.data + 32, "size": 8, "stream": 0})
    serve(service)
    copied = bytes(memory[32:40])
    service.device.batch_executor.stop_serving()
    memory[32:40] = 0
    driver.stand_in_events_answer(0)
    service._answer_what_is_ready()
    assert reply(lane) == ({"seq": 9, "err": 0}, [copied])


def test_while_python_holds_an_answer_c_stays_out(service, lane, driver, monkeypatch):
    """C answers at once what it serves: while Python holds an answer (a
    request of C's not done within the spin window), C leaves the next
    requests to Python, which answers none ahead of an earlier one whose
    work is done by then (tests/test_answer_order.py).  Once it is
    answered, C serves again."""
    driver.stand_in_memory(ctypes.c_size_t(1 << 20), ctypes.c_size_t(service.device.memory_total()))
    monkeypatch.setattr(service.device, "mem_get_info", lambda: (7, 8))  # Python's answer, told apart
    service._spin_seconds = 0.0
    driver.stand_in_events_answer(NOT_READY)
    send(lane, {"op": "stream_sync", "seq": 1, "stream": 0}, {"op": "mem_info", "seq": 2})
    serve(service)
    serve(service)
    assert [isinstance(later.completion, cuda_batches.ServedRequest) for later in service._later] == [True]
    assert reply(lane)[0] == {"seq": 2, "err": 0, "free": 7, "total": 8}  # Python's
    driver.stand_in_events_answer(0)
    service._answer_what_is_ready()
    assert reply(lane)[0] == {"seq": 1, "err": 0}
    lane.send({"op": "mem_info", "seq": 3})
    serve(service)
    assert reply(lane)[0] == {"seq": 3, "err": 0, "free": 1 << 20, "total": service.device.memory_total()}  # C's


def test_a_driver_error_is_told_by_python_and_c_stays_out_after(service, lane, memory, driver):
    driver.stand_in_events_answer(ILLEGAL_ADDRESS)
    at = memory.ctypes.data
    send(lane, {"op": "dtoh", "seq": 1, "src": at, "size": 4, "stream": 0})
    serve(service)
    service._answer_what_is_ready()
    header, _ = reply(lane)
    assert header["seq"] == 1 and header["err"] == cudaError.cudaErrorIllegalAddress
    assert "dtoh on GPU 0" in header["msg"]
    driver.stand_in_events_answer(0)
    before = sum(c.kind == DTOH for c in calls(driver))
    send(lane, {"op": "dtoh", "seq": 2, "src": at, "size": 4, "stream": 0})
    serve(service)
    header, _ = reply(lane)
    assert header["seq"] == 2 and header["err"] == cudaError.cudaErrorIllegalAddress  # sticky, as CUDA's
    assert sum(c.kind == DTOH for c in calls(driver)) == before


def test_device_output_goes_back_with_python_s_reply(service, lane, memory, driver, monkeypatch):
    output = tempfile.TemporaryFile()
    output.write(b"hello from a kernel\n")
    output.flush()
    monkeypatch.setattr(service.device, "output_position", lambda: (output.fileno(), 0))
    monkeypatch.setattr(service.device, "take_output", lambda: "hello from a kernel\n")
    send(lane, {"op": "sync", "seq": 1})
    serve(service)
    service._answer_what_is_ready()
    assert reply(lane)[0] == {"seq": 1, "err": 0, "out": "hello from a kernel\n"}
    output.close()


def c_serves(header: bytes, memory) -> bool:
    """Whether a header is exactly a download C serves: a map of op "dtoh",
    seq, src, size and stream once each, in any order, non-negative
    integers, the copy inside `memory`, at most 64 KiB, on the legacy stream."""
    try:
        decoded = protocol.unpack(header)
    except Exception:
        return False
    if (not isinstance(decoded, dict) or set(decoded) != {"op", "seq", "src", "size", "stream"}
            or decoded["op"] != "dtoh"):
        return False
    fields = [decoded[k] for k in ("seq", "src", "size", "stream")]
    if not all(type(v) is int and 0 <= v < 1 << 63 for v in fields):
        return False
    _, src, size, stream = fields
    start = memory.ctypes.data
    return stream == 0 and 0 < size <= 64 << 10 and start <= src and src + size <= start + memory.size


def test_c_takes_exactly_the_requests_it_serves(service, lane, memory, driver):
    """Every one-byte change of a good download's header: C takes the
    message only when it is still exactly a download C serves (else Python
    answers it: a refusal, another request, or an undecodable header), and
    whoever answers, the lane stays in step."""
    at = memory.ctypes.data
    good = protocol.pack({"op": "dtoh", "seq": 1, "src": at + 16, "size": 4, "stream": 0})
    served_by_c = 0
    for position in range(len(good)):
        for value in {0x00, 0x05, 0x7f, 0xa4, 0xc0, 0xcc, 0xd3, 0xff, good[position] ^ 1}:
            header = good[:position] + bytes([value]) + good[position + 1:]
            before = sum(c.kind == DTOH for c in calls(driver))
            lane.send_raw(header)
            serve(service)
            assert service._lane is not None
            taken = sum(c.kind == DTOH for c in calls(driver)) - before
            assert taken == c_serves(header, memory), (position, value, header)
            served_by_c += taken
            while lane.readable():
                reply(lane)
    assert served_by_c > 5  # other seqs, sizes, addresses: still downloads C serves
    lane.send_raw(good)
    serve(service)
    assert reply(lane) == ({"seq": 1, "err": 0}, [bytes(memory[16:20])])


def test_a_sealed_lane_or_no_executor_is_served_by_python(service, lane, memory, driver, monkeypatch):
    monkeypatch.setattr(service.device, "request_server", lambda: None)
    send(lane, {"op": "dtoh", "seq": 1, "src": memory.ctypes.data, "size": 4, "stream": 0})
    serve(service)
    header, _ = reply(lane)
    assert header["seq"] == 1 and header["err"] == cudaError.cudaErrorInvalidValue  # the fake's memory, not C's
    assert not any(c.kind == DTOH for c in calls(driver))


# ---------------------------------------------------------------- on a GPU


@pytest.fixture
def gpu_service(monkeypatch):
    """A session's GPU thread on the cupy backend and a real GPU."""
    import zmq
    import types
    from test_backends import cupy_unavailable
    if reason := cupy_unavailable():
        pytest.skip(reason)
    from rcuda.server.backends import create_backend
    from rcuda.server.backends.base import VA_WINDOW_SIZE
    from rcuda.server.device_service import DeviceService
    backend = create_backend("cupy", 1)
    window = backend.reserve(0, VA_WINDOW_SIZE, 0x2000_0000_0000)
    device = backend.open_device(0, window)
    context = zmq.Context()
    service = DeviceService(context, types.SimpleNamespace(), 0, "127.0.0.1")
    service.device = device
    yield service
    service.socket.close()
    context.term()
    device.close()
    window.release()


def test_requests_are_served_by_c_on_a_gpu(gpu_service, monkeypatch):
    service = gpu_service
    device = service.device
    client = open_lane(service)
    service._handlers["stream_create"]({"stream": 3, "flags": 0, "priority": 0}, [])
    service._handlers["event_create"]({"event": 4, "flags": 0}, [])
    out = device.malloc(1 << 16)

    def python_must_not(*args, **kwargs):
        raise AssertionError("served by Python")
    monkeypatch.setattr(device, "memcpy_dtoh", python_must_not)
    monkeypatch.setattr(device, "memcpy_htod", python_must_not)
    # Each done within C's spin window: one left to Python to answer would
    # leave the next requests to Python too (so that none overtakes it).
    service._spin_seconds = 1.0
    data = os.urandom(1 << 16)
    send(client, ({"op": "htod", "seq": 1, "dst": out, "size": len(data), "stream": 3}, [data]),
         {"op": "stream_sync", "seq": 2, "stream": 3},
         {"op": "dtoh", "seq": 3, "src": out + 4, "size": 4, "stream": 0},
         {"op": "dtoh", "seq": 4, "src": out, "size": len(data), "stream": 3},
         {"op": "sync", "seq": 5})
    service._serve_what_arrives()
    service._handlers["event_record"]({"event": 4, "stream": 3}, [])
    send(client, {"event": 4, "op": "event_sync", "seq": 6})
    answers = {}
    for _ in range(1000):  # bounded: each round serves what came, or answers what is done
        service._serve_what_arrives()
        service._answer_what_is_ready()
        while client.readable():
            header, frames = reply(client)
            answers[header["seq"]] = (header, frames)
        if len(answers) == 6:
            break
    assert {seq: header["err"] for seq, (header, _) in answers.items()} == {seq: 0 for seq in range(1, 7)}
    assert answers[3][1] == [data[4:8]] and answers[4][1] == [data]
    assert device.request_server() is not None and service.usage.calls == 6
    client.close()
