"""Executable CUDA graphs of a session on one GPU.

The client instantiates a graph by sending its work as the requests the
nodes' stream operations would send (`graph_create`: a list of headers, and
their payload frames back to back); a `graph_launch` runs a range of that
list in one of the session's streams, each request served by the same
handler that serves it alone, with the launch's stream in place of the one
it was recorded with.  So a graph's node means exactly what its operation
means outside a graph, and a launched graph costs one message.  On a GPU,
a run of kernels, memsets and copies is captured into a CUDA graph of the
device's own the first time it runs (the handlers' work recorded by the
driver's stream capture), and later launches launch that graph: one driver
call however many nodes.

Every request is checked when the graph is made (a known op that a graph
may hold, sent without a reply, its fields of the right types); what a
handler checks at run time (ranges, ids) is checked at each launch, as a
launch of the operation would be.  A failing request fails alone, the first
failure is reported (as for a batch of launches); a sticky one stops the
rest.
"""
from __future__ import annotations

import logging

import msgpack

from rcuda import protocol
from rcuda.errors import CudaError, ProtocolError, cudaError, is_sticky

log = logging.getLogger(__name__)

#: The requests a graph may hold: stream work that is sent without a reply.
GRAPH_OPS = frozenset({"launch", "memset", "memset3d", "dtod", "dtod3d", "copy_batch", "event_record",
                       "stream_wait", "lib", "stream_mem_ops"})
#: The requests a graph of the device's own may hold (server/backends/base.py's
#: graph_capture): kernels, memsets and copies within the GPU.
CAPTURED_OPS = frozenset({"launch", "memset", "memset3d", "dtod", "dtod3d"})
_UNCAPTURED = object()
#: A graph's requests, at most (a graph of 100,000 kernels is far beyond any program's).
MAX_GRAPH_REQUESTS = 1 << 20


def _prepared_launch(request: dict, frames: list) -> tuple:
    """A `launch` request's arguments, checked as the launch handler checks
    them, once: (fn, grid, block, shmem, params, cooperative, cluster)."""
    dims = [request["grid"], request["block"], *([request["cluster"]] if "cluster" in request else [])]
    for value in dims:
        if len(value) != 3 or not all(isinstance(v, int) and 0 < v < 2**32 for v in value):
            raise ProtocolError("graph_create: a launch's grid, block and cluster must be three positive 32-bit "
                                "integers")
    if len(frames) != 1 or request["cooperative"] not in (0, 1) or request["shmem"] < 0:
        raise ProtocolError("graph_create: a launch needs one parameter frame, cooperative 0 or 1, shmem >= 0")
    cluster = tuple(request["cluster"]) if "cluster" in request else None
    return (request["fn"], tuple(request["grid"]), tuple(request["block"]), request["shmem"],
            bytes(frames[0].buffer), request["cooperative"] == 1, cluster)


def _joined(payload) -> bytes:
    return b"".join(bytes(frame.buffer) for frame in payload)


class _Kept:
    """A payload frame kept with its graph (the message's own is reused)."""

    __slots__ = ("buffer",)

    def __init__(self, data: bytes):
        self.buffer = memoryview(data)

    def __len__(self) -> int:
        return len(self.buffer)


class GraphOps:
    """The `graph_create`, `graph_launch` and `graph_destroy` requests of
    one GPU's service."""

    def __init__(self, service):
        self._service = service
        self._graphs: dict[int, list] = {}  # graph id -> [(header, frames, a launch's arguments or None)]
        self._captured: dict[tuple, object] = {}  # (graph id, first, count) -> the device's graph, or _UNCAPTURED

    def handlers(self) -> dict:
        return {"graph_create": self.create, "graph_launch": self.launch, "graph_destroy": self.destroy}

    def forget(self) -> None:
        """The session's graphs are gone (cudaDeviceReset, close): the
        device's own went with its context."""
        self._graphs.clear()
        self._captured.clear()

    def create(self, header, payload):
        """The graph's work: the payload is one msgpack list (in frames of
        at most protocol.CHUNK_SIZE) of [header, [frame, ...]] pairs."""
        try:
            work = msgpack.unpackb(_joined(payload), raw=False, strict_map_key=True)
        except Exception as exc:  # msgpack raises several unrelated types
            raise ProtocolError(f"graph_create: undecodable work: {exc}") from None
        if not isinstance(work, list) or len(work) > MAX_GRAPH_REQUESTS:
            raise ProtocolError(f"graph_create: the work must be a list of at most {MAX_GRAPH_REQUESTS} requests")
        kept = []
        for item in work:
            if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], dict)
                    or not isinstance(item[1], list) or not all(isinstance(f, bytes) for f in item[1])):
                raise ProtocolError("graph_create: each request must be [header, [bytes, ...]]")
            request = item[0]
            op = protocol.check_header(dict(request, seq=0))
            if op not in GRAPH_OPS:
                raise ProtocolError(f"graph_create: a graph cannot hold a {op} request")
            if protocol.expects_reply(request):
                raise ProtocolError(f"graph_create: a {op} request in a graph must be sent without a reply")
            frames = [_Kept(frame) for frame in item[1]]
            kept.append((request, frames, _prepared_launch(request, frames) if op == "launch" else None))
        self._release(header["graph"])  # an update: the device's graphs of the old work go
        self._graphs[header["graph"]] = kept

    def launch(self, header, payload):
        self._launch(header["graph"], header["first"], header["count"], self._service.stream_id(header))

    def launch_whole(self, graph_id: int, stream: int) -> None:
        """All of a graph's work, in `stream` (a graph launch C recorded
        among the launches: server/device_service.py, `launches`)."""
        graph = self._graphs.get(graph_id)
        self._launch(graph_id, 0, len(graph) if graph is not None else 0, stream)

    def _launch(self, graph_id: int, first: int, count: int, stream: int) -> None:
        graph = self._graphs.get(graph_id)
        if graph is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"graph_launch: unknown graph {graph_id}")
        if first < 0 or count < 0 or first + count > len(graph):
            raise ProtocolError(f"graph_launch: requests {first}..+{count} of a graph of {len(graph)}")
        part = graph[first:first + count]
        self._service.usage.calls += max(count - 1, 0)  # each node is a call (the message counted one)
        captured = self._captured_graph(graph_id, first, part, stream)
        if captured is not None:
            self._service.device.graph_launch(captured, stream)
            return
        self._run(part, stream)

    def _run(self, part: list, stream: int) -> None:
        """The requests one by one, as if each came alone (a launch checked
        when the graph was made: only what may have changed since)."""
        service, first_error = self._service, None
        handlers, device = service.request_handlers, service.device
        for request, frames, launch in part:
            try:
                if launch is None:
                    handlers[request["op"]](dict(request, stream=stream), frames)
                    continue
                fn, grid, block, shmem, params, cooperative, cluster = launch
                handle, layout = service.function(fn, "graph_launch")
                if len(params) != layout.buffer_size:
                    raise ProtocolError(f"graph_launch: {len(params)} parameter bytes for function {fn} (needs "
                                        f"{layout.buffer_size})")
                device.launch(handle, grid, block, params, shmem, stream, cooperative=cooperative, cluster=cluster)
            except CudaError as exc:
                if is_sticky(exc.status):
                    raise
                first_error = first_error or exc
        if first_error is not None:
            raise first_error

    def _captured_graph(self, graph_id: int, first: int, part: list, stream: int):
        """The device's own graph of `part` (a GPU's: the backend captures
        the requests as they run the first time, server/backends/base.py's
        graph_capture), or None: run it request by request (the sim, a
        request a graph of the device cannot hold, a capture that failed)."""
        key = (graph_id, first, len(part))
        captured = self._captured.get(key)
        if captured is not None:
            return None if captured is _UNCAPTURED else captured
        if len(part) < 2 or not all(request["op"] in CAPTURED_OPS for request, _, _ in part):
            self._captured[key] = _UNCAPTURED
            return None
        try:
            captured = self._service.device.graph_capture(stream, lambda: self._run(part, stream))
        except NotImplementedError:
            self._captured[key] = _UNCAPTURED
            return None
        except CudaError as exc:
            if is_sticky(exc.status):
                raise
            log.info("GPU%d: graph %d runs request by request: %s", self._service.index, graph_id, exc)
            self._captured[key] = _UNCAPTURED
            return None
        self._captured[key] = captured
        return captured

    def _release(self, graph_id: int | None = None) -> None:
        """Free the device's graphs made of graph `graph_id` (None: all)."""
        for key in [k for k in self._captured if graph_id is None or k[0] == graph_id]:
            captured = self._captured.pop(key)
            if captured is not _UNCAPTURED and self._service.device is not None:
                self._service.device.graph_release(captured)

    def destroy(self, header, payload):
        if self._graphs.pop(header["graph"], None) is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"graph_destroy: unknown graph {header['graph']}")
        self._release(header["graph"])
