"""CUDA runtime functions: stream capture (the model: client/capture.py).

Every query is answered by the client, without a round trip: frameworks
ask on every allocation whether a stream is capturing (PyTorch's caching
allocator, cudaStreamIsCapturing).
"""
from __future__ import annotations

from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError

from .. import capture as captures_model
from .. import interposer
from ..interposer import out_pointer, stream_of
from .core import SUCCESS, cuda

CAPTURE_MODES = set(ENUMS["cudaStreamCaptureMode"].values())
ADD_DEPENDENCIES, SET_DEPENDENCIES = 0, 1  # cudaStreamAddCaptureDependencies, cudaStreamSetCaptureDependencies


def rt():
    return interposer.rt


def capture_status(stream_handle, per_thread: bool) -> int:
    """The capture status of the program's stream `stream_handle` (checked: a
    destroyed or unknown stream is an error, as in CUDA)."""
    return rt().captures.status(stream_of(stream_handle, per_thread))


@cuda(stream_variants=True)
def cudaStreamBeginCapture(stream, mode, per_thread=False):
    """The capture's graph is a graph of the program's at once: nodes may be
    added to it during the capture (cudaStreamGetCaptureInfo gives it)."""
    capture = rt().captures.begin(stream_of(stream, per_thread), mode)
    rt().graphs.add_graph(capture.graph)
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamBeginCaptureToGraph(stream, graph, dependencies, dependencyData, numDependencies, mode,
                                  per_thread=False):
    """Capture into an existing graph, after `dependencies` (nodes of it)."""
    from .graphs import _check_edge_data, _graph, _nodes
    g = _graph(graph)
    _check_edge_data(dependencyData, numDependencies)
    deps = g.own_nodes(_nodes(dependencies, numDependencies, "dependency"), "dependency")
    rt().captures.begin(stream_of(stream, per_thread), mode, g, deps)
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamEndCapture(stream, pGraph, per_thread=False):
    """pGraph may be NULL for a capture into a graph of the program's
    (cudaStreamBeginCaptureToGraph)."""
    s = stream_of(stream, per_thread)
    capture = rt().captures.of(s)
    if pGraph == interposer.ffi.NULL and (capture is None or capture.owns_graph):
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaStreamEndCapture: pGraph is NULL")
    try:
        graph = rt().captures.end(s)
    except CudaError:
        if capture is not None and capture.origin is s:
            if capture.owns_graph and capture.graph.handle in rt().graphs.graphs:
                rt().graphs.destroy_graph(capture.graph.handle)
            if pGraph != interposer.ffi.NULL:
                pGraph[0] = interposer.ffi.NULL
        raise
    if pGraph != interposer.ffi.NULL:
        pGraph[0] = interposer.ffi.cast("cudaGraph_t", graph.handle)
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamIsCapturing(stream, pCaptureStatus, per_thread=False):
    out_pointer(pCaptureStatus, "pCaptureStatus")[0] = capture_status(stream, per_thread)
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamGetCaptureInfo(stream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                             numDependencies_out, per_thread=False):
    """Of a stream that is not capturing only the status is defined; the
    other outputs are left as they are, as CUDA leaves them.  The
    dependency list stays valid until the stream's next capture call."""
    s = stream_of(stream, per_thread)
    out_pointer(captureStatus_out, "captureStatus_out")[0] = rt().captures.status(s)
    capture = rt().captures.of(s)
    if capture is None:
        return SUCCESS
    ffi = interposer.ffi
    if id_out != ffi.NULL:
        id_out[0] = capture.id
    if graph_out != ffi.NULL:
        graph_out[0] = ffi.cast("cudaGraph_t", capture.graph.handle)
    deps = capture.deps.get(s, [])
    if dependencies_out != ffi.NULL:
        listed = ffi.new("cudaGraphNode_t[]", [ffi.cast("cudaGraphNode_t", n.handle) for n in deps] or 1)
        capture.listed = listed  # kept alive with the capture
        dependencies_out[0] = listed
    if edgeData_out != ffi.NULL:
        edges = ffi.new("cudaGraphEdgeData[]", max(len(deps), 1))
        capture.listed_edges = edges
        edgeData_out[0] = edges
    if numDependencies_out != ffi.NULL:
        numDependencies_out[0] = len(deps)
    return SUCCESS


@cuda(stream_variants=True)
def cudaStreamUpdateCaptureDependencies(stream, dependencies, dependencyData, numDependencies, flags,
                                        per_thread=False):
    """Add to (0) or replace (cudaStreamSetCaptureDependencies) the nodes the
    stream's next captured operation depends on."""
    from .graphs import _check_edge_data, _nodes
    s = stream_of(stream, per_thread)
    capture = rt().captures.of(s)
    if capture is None:
        raise CudaError(cudaError.cudaErrorIllegalState, "cudaStreamUpdateCaptureDependencies: the stream is not "
                                                         "capturing")
    if flags not in (ADD_DEPENDENCIES, SET_DEPENDENCIES):
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaStreamUpdateCaptureDependencies flags {flags:#x}")
    _check_edge_data(dependencyData, numDependencies)
    nodes = capture.graph.own_nodes(_nodes(dependencies, numDependencies, "dependency"), "dependency")
    if flags == SET_DEPENDENCIES:
        capture.deps[s] = list(dict.fromkeys(nodes))
    else:
        capture.deps[s] = capture.deps[s] + [n for n in dict.fromkeys(nodes) if n not in capture.deps[s]]
    return SUCCESS


@cuda()
def cudaThreadExchangeStreamCaptureMode(mode):
    """Swap the calling thread's capture interaction mode with *mode."""
    out_pointer(mode, "mode")
    if mode[0] not in CAPTURE_MODES:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaThreadExchangeStreamCaptureMode: mode {mode[0]}")
    mode[0] = captures_model.exchange_thread_mode(int(mode[0]))
    return SUCCESS


