"""The server's side of CUDA graphs (server/graphs.py), spoken to directly:
a graph's work runs in the launch's stream through the same handlers as
each request alone, and a malformed graph gets an error and changes
nothing."""
from __future__ import annotations

import msgpack
import pytest

from auth_helpers import KeyedSession
from rcuda import protocol
from rcuda.errors import CudaError, cudaError


@pytest.fixture
def session(sim_server):
    session = KeyedSession(sim_server.address, None)
    yield session
    session.close()



def _work(*requests) -> list:
    """graph_create's payload: one msgpack list of [header, [frame, ...]]."""
    return [msgpack.packb([[header, list(frames)] for header, frames in requests], use_bin_type=True)]


def _memset(ptr: int, value: int, size: int, **extra) -> tuple:
    return {"op": "memset", "ptr": ptr, "value": value, "size": size, "stream": 999, "async": True, **extra}, ()


def test_a_graph_runs_its_requests_in_the_launch_stream_as_often_as_launched(session):
    ptr = session.call({"op": "malloc", "size": 128})["ptr"]
    session.call({"op": "stream_create", "stream": 5, "flags": 0, "priority": 0})
    copy = {"op": "dtod", "dst": ptr + 64, "src": ptr, "size": 64, "stream": 999, "async": True}
    assert session.call({"op": "graph_create", "graph": 1}, _work(_memset(ptr, 7, 64), (copy, ())))["err"] == 0
    session.send({"op": "graph_launch", "graph": 1, "stream": 5, "first": 0, "count": 2})
    assert session.call({"op": "stream_sync", "stream": 5})["err"] == 0
    assert session.read(ptr, 128) == bytes([7]) * 128
    # Only the second request, after the first part of the memory changed.
    session.call({"op": "memset", "ptr": ptr, "value": 1, "size": 64, "stream": 0})
    session.send({"op": "graph_launch", "graph": 1, "stream": 0, "first": 1, "count": 1})
    assert session.read(ptr + 64, 64) == bytes([1]) * 64
    # Work given again under the same id replaces it; destroyed, it is gone.
    assert session.call({"op": "graph_create", "graph": 1}, _work(_memset(ptr, 3, 8)))["err"] == 0
    session.send({"op": "graph_launch", "graph": 1, "stream": 0, "first": 0, "count": 1})
    assert session.read(ptr, 9) == bytes([3]) * 8 + bytes([1])
    assert session.call({"op": "graph_destroy", "graph": 1})["err"] == 0
    reply = session.call({"op": "graph_destroy", "graph": 1})
    assert reply["err"] == int(cudaError.cudaErrorInvalidResourceHandle)


@pytest.mark.parametrize("payload, error", [
    ([b"\xc1 not msgpack"], "undecodable"),
    (_work(({"op": "malloc", "size": 64}, ())), "cannot hold a malloc"),
    (_work(({"op": "memset", "ptr": 1, "value": 0, "size": 1, "stream": 0}, ())), "without a reply"),
    (_work(({"op": "memset", "ptr": 1, "value": 0, "stream": 0, "async": True}, ())), "size"),
    ([msgpack.packb([["not a header", []]])], "[header, [bytes"),
    ([msgpack.packb({"a": 1})], "must be a list"),
    (_work(({"op": "launch", "fn": 1, "grid": [0, 1, 1], "block": [1, 1, 1], "shmem": 0, "stream": 0,
             "cooperative": 0}, (b"",))), "three positive"),
    (_work(({"op": "launch", "fn": 1, "grid": [1, 1, 1], "block": [1, 1, 1], "shmem": 0, "stream": 0,
             "cooperative": 0}, ())), "one parameter frame"),
])
def test_a_malformed_graph_is_refused_and_the_session_goes_on(session, payload, error):
    reply = session.call({"op": "graph_create", "graph": 4}, payload)
    assert reply["err"] and error in reply["msg"], reply
    session.send({"op": "graph_launch", "graph": 4, "stream": 0, "first": 0, "count": 1})
    reply = session.call({"op": "sync"})  # the launch of a graph that was never made: reported here
    assert reply["err"] == int(cudaError.cudaErrorInvalidResourceHandle) and "unknown graph" in reply["msg"]
    assert session.call({"op": "sync"})["err"] == 0


def test_a_launch_outside_the_graph_or_into_an_unknown_stream_is_refused(session):
    ptr = session.call({"op": "malloc", "size": 8})["ptr"]
    assert session.call({"op": "graph_create", "graph": 2}, _work(_memset(ptr, 9, 8)))["err"] == 0
    for fields, status in [({"first": 0, "count": 2}, cudaError.cudaErrorInvalidValue),
                           ({"first": -1, "count": 1}, cudaError.cudaErrorInvalidValue),
                           ({"stream": 77}, cudaError.cudaErrorInvalidResourceHandle)]:
        session.send(dict({"op": "graph_launch", "graph": 2, "stream": 0, "first": 0, "count": 1}, **fields))
        reply = session.call({"op": "sync"})
        assert reply["err"] == int(status), (fields, reply)
    assert session.read(ptr, 8) == bytes(8)  # none of them ran
    assert protocol.expects_reply({"op": "graph_create", "graph": 1})
    assert not protocol.expects_reply({"op": "graph_launch", "graph": 1, "stream": 0, "first": 0, "count": 1})


# ---------------------------------------------------------------- a GPU's own graphs, with a stand-in device


class _Device:
    """Records what server/graphs.py asks of a backend device: the work
    it runs (`ran`) and the graphs it captures, launches and frees."""

    def __init__(self, capture_fails: bool = False):
        self.ran, self.captured, self.launched, self.released = [], [], [], []
        self.capturing = False
        self.capture_fails = capture_fails

    def memset(self, ptr, value, size, stream, elem=1):
        self.ran.append(("memset", ptr, stream, self.capturing))

    def graph_capture(self, stream, run):
        self.capturing = True
        try:
            run()
            if self.capture_fails:
                raise CudaError(cudaError.cudaErrorStreamCaptureUnsupported, "not capturable")
        finally:
            self.capturing = False
        graph = f"graph{len(self.captured)}"
        self.captured.append((graph, stream))
        return graph

    def graph_launch(self, graph, stream):
        self.launched.append((graph, stream))

    def graph_release(self, graph):
        self.released.append(graph)


class _Service:
    """What GraphOps needs of server/device_service.py."""

    def __init__(self, device):
        from rcuda.server.device_service import Usage
        self.device, self.index, self.usage = device, 0, Usage()
        self.request_handlers = {"memset": self._memset, "event_record": self._event_record}

    def _memset(self, header, payload):
        self.device.memset(header["ptr"], header["value"], header["size"], header["stream"])

    def _event_record(self, header, payload):
        self.device.ran.append(("event_record", header["event"], header["stream"], self.device.capturing))

    def stream_id(self, header):
        return header["stream"]


def _graph_ops(device):
    from rcuda.server.graphs import GraphOps
    return GraphOps(_Service(device))


def _frames(payload):
    from rcuda.lane import LaneFrame
    return [LaneFrame(memoryview(frame)) for frame in payload]


def test_a_gpu_captures_a_run_once_and_launches_its_graph_after():
    device = _Device()
    ops = _graph_ops(device)
    ops.create({"graph": 1}, _frames(_work(_memset(0x100, 1, 8), _memset(0x200, 2, 8))))
    for stream in (3, 4, 3):
        ops.launch({"graph": 1, "first": 0, "count": 2, "stream": stream}, [])
    # The first launch ran the handlers once, under capture, then launched the graph.
    assert device.ran == [("memset", 0x100, 3, True), ("memset", 0x200, 3, True)]
    assert device.captured == [("graph0", 3)]
    assert device.launched == [("graph0", 3), ("graph0", 4), ("graph0", 3)]
    # New work under the same id frees the old graph; destroying the graph frees its new one.
    ops.create({"graph": 1}, _frames(_work(_memset(0x300, 3, 8), _memset(0x400, 4, 8))))
    assert device.released == ["graph0"]
    ops.launch({"graph": 1, "first": 0, "count": 2, "stream": 5}, [])
    ops.destroy({"graph": 1}, [])
    assert device.released == ["graph0", "graph1"]


def test_a_gpu_runs_request_by_request_what_it_cannot_capture():
    device = _Device()
    ops = _graph_ops(device)
    record = {"op": "event_record", "event": 7, "stream": 999, "async": True}
    ops.create({"graph": 1}, _frames(_work(_memset(0x100, 1, 8), (record, ()))))
    ops.launch({"graph": 1, "first": 0, "count": 2, "stream": 3}, [])
    ops.launch({"graph": 1, "first": 0, "count": 1, "stream": 3}, [])  # a single request: nothing to gain
    assert device.captured == [] and device.launched == []
    assert device.ran == [("memset", 0x100, 3, False), ("event_record", 7, 3, False), ("memset", 0x100, 3, False)]
    # A capture the device refuses: the run goes request by request, now and later.
    device = _Device(capture_fails=True)
    ops = _graph_ops(device)
    ops.create({"graph": 2}, _frames(_work(_memset(0x100, 1, 8), _memset(0x200, 2, 8))))
    ops.launch({"graph": 2, "first": 0, "count": 2, "stream": 3}, [])
    ops.launch({"graph": 2, "first": 0, "count": 2, "stream": 3}, [])
    assert device.launched == [] and [r[3] for r in device.ran] == [True, True, False, False, False, False]
