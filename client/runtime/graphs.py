"""CUDA runtime functions: graphs, their nodes, executable graphs, user
objects (the model and how a graph runs: client/graphs.py).

The functions that make a node's work (`add_*_node`, `*_work`) are shared
with the driver's cuGraph* functions (client/driver/graphs.py): one
implementation, two faces.

Where rcuda differs from a local GPU: the nodes of a launched graph run one
after the other in the launch's stream, in an order that honours every
dependency (branches a GPU would overlap take turns); a graph's work must be
on one GPU; conditional nodes, external semaphore nodes and device-side
graph launches are not supported (cudaErrorNotSupported).
"""
from __future__ import annotations

import logging

from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError

from .. import graphs, interposer
from ..capture import Recording
from ..driver.loading import kernel_on
from ..graphs import Graph, GraphExec, UserObject
from ..interposer import address, out_pointer, stream_of
from .boxes import box_node_params, box_work, memset_box, sides_3d
from .core import SUCCESS, cuda, kernel_node_params, kernel_work
from .memory import copy_node_params, copy_work, graph_memory, symbol_address
from .streams import event_work, host_work

log = logging.getLogger(__name__)

UPDATE = ENUMS["cudaGraphExecUpdateResult"]
INSTANTIATE = ENUMS["cudaGraphInstantiateResult"]
MEMCPY_KINDS = ENUMS["cudaMemcpyKind"]
GRAPH_MEM_ATTRIBUTES = ENUMS["cudaGraphMemAttributeType"]
#: cudaGraphInstantiateFlagAutoFreeOnLaunch, ...Upload, ...DeviceLaunch, ...UseNodePriority
INSTANTIATE_FLAGS = 1 | 2 | 4 | 8
DEVICE_LAUNCH = 4
USER_OBJECT_NO_DESTRUCTOR_SYNC = 1
GRAPH_USER_OBJECT_MOVE = 1


def rt():
    return interposer.rt


def ffi():
    return interposer.ffi


def _graph(handle, what: str = "graph") -> Graph:
    return rt().graphs.graph(address(handle), what)


def _node(handle, what: str = "node") -> graphs.Node:
    return rt().graphs.node(address(handle), what)


def _nodes(array, count: int, what: str) -> list:
    if count and array == ffi().NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{count} {what} at NULL")
    return [_node(array[i], what) for i in range(count)]


def _put_node(pointer, node) -> None:
    out_pointer(pointer, "pGraphNode")[0] = ffi().cast("cudaGraphNode_t", node.handle)


def _check_edge_data(edge_data, count: int) -> None:
    """Edge data other than the default (a programmatic dependency) is not supported."""
    if edge_data == ffi().NULL:
        return
    raw = bytes(ffi().buffer(edge_data, ffi().sizeof("cudaGraphEdgeData") * count))
    if any(raw):
        raise CudaError(cudaError.cudaErrorNotSupported, "edge data other than the default (programmatic "
                                                         "dependencies) is not supported by rcuda")


def _fill_list(out, count_pointer, items, what: str) -> None:
    """CUDA's list outputs: with `out` NULL the count only; else up to
    *count entries, NULL in the rest, and the number written."""
    out_pointer(count_pointer, what)
    if out == ffi().NULL:
        count_pointer[0] = len(items)
        return
    room = count_pointer[0]
    for i in range(room):
        out[i] = ffi().cast("cudaGraphNode_t", items[i].handle) if i < len(items) else ffi().NULL
    count_pointer[0] = min(room, len(items))


def _zero_edges(edge_data, count: int) -> None:
    if edge_data != ffi().NULL and count:
        ffi().memmove(edge_data, bytes(ffi().sizeof("cudaGraphEdgeData") * count),
                      ffi().sizeof("cudaGraphEdgeData") * count)


# ------------------------------------------------------------------ graphs


@cuda()
def cudaGraphCreate(pGraph, flags):
    out_pointer(pGraph, "pGraph")
    if flags:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaGraphCreate flags {flags:#x} (must be 0)")
    pGraph[0] = ffi().cast("cudaGraph_t", rt().graphs.add_graph(Graph()).handle)
    return SUCCESS


@cuda()
def cudaGraphDestroy(graph):
    rt().graphs.destroy_graph(address(graph))
    return SUCCESS


@cuda()
def cudaGraphClone(pGraphClone, originalGraph):
    out_pointer(pGraphClone, "pGraphClone")
    clone = rt().graphs.add_graph(_graph(originalGraph).clone())
    pGraphClone[0] = ffi().cast("cudaGraph_t", clone.handle)
    return SUCCESS


@cuda()
def cudaGraphNodeFindInClone(pNode, originalNode, clonedGraph):
    out_pointer(pNode, "pNode")
    found = _graph(clonedGraph).find_clone_of(_node(originalNode))
    if found is None:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphNodeFindInClone: the node is not in that clone's "
                                                         "original")
    pNode[0] = ffi().cast("cudaGraphNode_t", found.handle)
    return SUCCESS


@cuda()
def cudaGraphGetNodes(graph, nodes, numNodes):
    _fill_list(nodes, numNodes, _graph(graph).nodes, "numNodes")
    return SUCCESS


@cuda()
def cudaGraphGetRootNodes(graph, pRootNodes, pNumRootNodes):
    _fill_list(pRootNodes, pNumRootNodes, _graph(graph).roots(), "pNumRootNodes")
    return SUCCESS


@cuda()
def cudaGraphGetEdges(graph, from_, to, edgeData, numEdges):
    out_pointer(numEdges, "numEdges")
    edges = _graph(graph).edges()
    if from_ == ffi().NULL and to == ffi().NULL:
        numEdges[0] = len(edges)
        return SUCCESS
    if from_ == ffi().NULL or to == ffi().NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphGetEdges: from and to must both be given or NULL")
    room = numEdges[0]
    for i, (source, target) in enumerate(edges[:room]):
        from_[i] = ffi().cast("cudaGraphNode_t", source.handle)
        to[i] = ffi().cast("cudaGraphNode_t", target.handle)
    _zero_edges(edgeData, min(room, len(edges)))
    numEdges[0] = min(room, len(edges))
    return SUCCESS


@cuda()
def cudaGraphNodeGetDependencies(node, pDependencies, edgeData, pNumDependencies):
    deps = _node(node).deps
    _fill_list(pDependencies, pNumDependencies, deps, "pNumDependencies")
    _zero_edges(edgeData, min(len(deps), pNumDependencies[0]))
    return SUCCESS


@cuda()
def cudaGraphNodeGetDependentNodes(node, pDependentNodes, edgeData, pNumDependentNodes):
    n = _node(node)
    dependents = n.graph.dependents(n)
    _fill_list(pDependentNodes, pNumDependentNodes, dependents, "pNumDependentNodes")
    _zero_edges(edgeData, min(len(dependents), pNumDependentNodes[0]))
    return SUCCESS


def _edge_pairs(from_, to, edgeData, count: int, call: str) -> list:
    _check_edge_data(edgeData, count)
    return list(zip(_nodes(from_, count, f"{call} from"), _nodes(to, count, f"{call} to")))


@cuda()
def cudaGraphAddDependencies(graph, from_, to, edgeData, numDependencies):
    _graph(graph).add_edges(_edge_pairs(from_, to, edgeData, numDependencies, "cudaGraphAddDependencies"))
    return SUCCESS


@cuda()
def cudaGraphRemoveDependencies(graph, from_, to, edgeData, numDependencies):
    _graph(graph).remove_edges(_edge_pairs(from_, to, edgeData, numDependencies, "cudaGraphRemoveDependencies"))
    return SUCCESS


@cuda()
def cudaGraphNodeGetType(node, pType):
    out_pointer(pType, "pType")[0] = _node(node).type
    return SUCCESS


@cuda()
def cudaGraphDestroyNode(node):
    n = _node(node)
    n.graph.remove(n)
    if n.type == graphs.CHILD:
        n.params["graph"].release()
    return SUCCESS


@cuda()
def cudaGraphDebugDotPrint(graph, path, flags):
    """Graphviz text of the graph (flags other than 0: node details too)."""
    if path == ffi().NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphDebugDotPrint: path is NULL")
    name = ffi().string(path).decode()
    try:
        with open(name, "w", encoding="utf-8") as out:
            out.write(_graph(graph).dot(verbose=bool(flags)))
    except OSError as exc:
        raise CudaError(cudaError.cudaErrorOperatingSystem, f"cudaGraphDebugDotPrint: {name}: {exc}") from None
    return SUCCESS


# ------------------------------------------------------------------ adding nodes


def add_node(pGraphNode, graph, pDependencies, numDependencies, type_: int, params: dict, work=None) -> graphs.Node:
    """A node of `type_` after the dependencies given; its handle into *pGraphNode."""
    out_pointer(pGraphNode, "pGraphNode")
    g = _graph(graph)
    node = g.add(type_, params, _nodes(pDependencies, numDependencies, "dependency"), work)
    _put_node(pGraphNode, node)
    return node


def kernel_node(kernel, func: int, grid, block, shared_mem: int, args: bytes) -> tuple[dict, graphs.Work]:
    """A kernel node's parameters and work, on the current device: checked
    as its launch would be (for both APIs)."""
    device = rt().device()
    _, work = kernel_work(device, kernel, tuple(grid), tuple(block), shared_mem, args, False)
    params = kernel_node_params(kernel, grid, block, shared_mem, work)
    params["func"] = func
    return params, work


def _runtime_kernel_node(p, call: str) -> tuple[dict, graphs.Work]:
    out_pointer(p, "pNodeParams")
    if p.extra != ffi().NULL and p.kernelParams == ffi().NULL:
        raise CudaError(cudaError.cudaErrorNotSupported, f"{call}: parameters in `extra` (use kernelParams)")
    func = address(p.func)
    kernel = kernel_on(func, call)
    args = p.kernelParams
    if args == ffi().NULL and kernel.params.offsets:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: kernelParams is NULL")
    grid, block = (p.gridDim.x, p.gridDim.y, p.gridDim.z), (p.blockDim.x, p.blockDim.y, p.blockDim.z)
    return kernel_node(kernel, func, grid, block, p.sharedMemBytes, kernel.params.pack(ffi(), args))


@cuda()
def cudaGraphAddKernelNode(pGraphNode, graph, pDependencies, numDependencies, pNodeParams):
    params, work = _runtime_kernel_node(pNodeParams, "cudaGraphAddKernelNode")
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.KERNEL, params, work)
    return SUCCESS


def _kernel_node(node, call: str) -> graphs.Node:
    n = _node(node)
    if n.type != graphs.KERNEL or "kernel" not in n.params:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: not a kernel node")
    return n


@cuda()
def cudaGraphKernelNodeGetParams(node, pNodeParams):
    n = _kernel_node(node, "cudaGraphKernelNodeGetParams")
    out_pointer(pNodeParams, "pNodeParams")
    p, params = pNodeParams, n.params
    p.func = ffi().cast("void *", params.get("func") or 0)
    p.gridDim.x, p.gridDim.y, p.gridDim.z = params["grid"]
    p.blockDim.x, p.blockDim.y, p.blockDim.z = params["block"]
    p.sharedMemBytes = params["shmem"]
    p.kernelParams = _argument_pointers(params)
    p.extra = ffi().NULL
    return SUCCESS


def _argument_pointers(params: dict):
    """A pointer per kernel parameter into a copy the node keeps (CUDA's
    kernelParams from a node: valid while the node lives)."""
    if "c_args" not in params:
        kernel = params["kernel"]
        block = ffi().new("char[]", params["args"] or b"\0")
        pointers = ffi().new("void *[]", max(len(kernel.params.offsets), 1))
        for i, offset in enumerate(kernel.params.offsets):
            pointers[i] = block + offset
        params["c_args"] = (block, pointers)
    return params["c_args"][1]


@cuda()
def cudaGraphKernelNodeSetParams(node, pNodeParams):
    n = _kernel_node(node, "cudaGraphKernelNodeSetParams")
    n.params, n.work = _runtime_kernel_node(pNodeParams, "cudaGraphKernelNodeSetParams")
    return SUCCESS


@cuda()
def cudaGraphKernelNodeGetAttribute(hNode, attr, value_out):
    n = _kernel_node(hNode, "cudaGraphKernelNodeGetAttribute")
    out_pointer(value_out, "value_out")
    saved = n.params["attributes"].get(attr)
    size = ffi().sizeof("cudaLaunchAttributeValue")
    ffi().memmove(value_out, saved if saved is not None else bytes(size), size)
    return SUCCESS


@cuda()
def cudaGraphKernelNodeSetAttribute(hNode, attr, value):
    """Attributes are kept and answered; the launch honours none (rcuda's
    launches ignore the same hints a cudaLaunchKernelEx gives)."""
    n = _kernel_node(hNode, "cudaGraphKernelNodeSetAttribute")
    out_pointer(value, "value")
    n.params["attributes"][attr] = bytes(ffi().buffer(value, ffi().sizeof("cudaLaunchAttributeValue")))
    return SUCCESS


@cuda()
def cudaGraphKernelNodeCopyAttributes(hDst, hSrc):
    dst, src = _kernel_node(hDst, "cudaGraphKernelNodeCopyAttributes"), _kernel_node(hSrc, "cudaGraphKernelNodeCopyAttributes")
    dst.params["attributes"] = dict(src.params["attributes"])
    return SUCCESS


# -- memcpy


def memcpy_1d_node(dst: int, src: int, count: int, kind: int) -> tuple[dict, graphs.Work]:
    return copy_node_params(dst, src, count, kind), copy_work(rt().device(), dst, src, count, kind)


def _memcpy_3d_node(p, call: str) -> tuple[dict, graphs.Work]:
    out_pointer(p, "pCopyParams")
    kept = ffi().new("struct cudaMemcpy3DParms *", p[0])  # for GetParams
    dst, src, extent = sides_3d(kept, call)
    params = box_node_params(dst, src, extent)
    params["struct"] = kept
    return params, box_work(rt().device(), dst, src, extent, call)


@cuda()
def cudaGraphAddMemcpyNode(pGraphNode, graph, pDependencies, numDependencies, pCopyParams):
    params, work = _memcpy_3d_node(pCopyParams, "cudaGraphAddMemcpyNode")
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.MEMCPY, params, work)
    return SUCCESS


@cuda()
def cudaGraphAddMemcpyNode1D(pGraphNode, graph, pDependencies, numDependencies, dst, src, count, kind):
    params, work = memcpy_1d_node(address(dst), address(src), count, kind)
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.MEMCPY, params, work)
    return SUCCESS


def _symbol_address(symbol, count: int, offset: int, call: str) -> int:
    ptr, size = symbol_address(symbol)
    if offset + count > size:
        raise CudaError(cudaError.cudaErrorInvalidValue,
                        f"{call}: {count} bytes at offset {offset} run past the {size}-byte variable")
    return ptr + offset


@cuda()
def cudaGraphAddMemcpyNodeToSymbol(pGraphNode, graph, pDependencies, numDependencies, symbol, src, count, offset,
                                   kind):
    dst = _symbol_address(symbol, count, offset, "cudaGraphAddMemcpyNodeToSymbol")
    params, work = memcpy_1d_node(dst, address(src), count, kind)
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.MEMCPY, params, work)
    return SUCCESS


@cuda()
def cudaGraphAddMemcpyNodeFromSymbol(pGraphNode, graph, pDependencies, numDependencies, dst, symbol, count, offset,
                                     kind):
    src = _symbol_address(symbol, count, offset, "cudaGraphAddMemcpyNodeFromSymbol")
    params, work = memcpy_1d_node(address(dst), src, count, kind)
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.MEMCPY, params, work)
    return SUCCESS


def _memcpy_node(node, call: str) -> graphs.Node:
    n = _node(node)
    if n.type != graphs.MEMCPY:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: not a memcpy node")
    return n


@cuda()
def cudaGraphMemcpyNodeGetParams(node, pNodeParams):
    n = _memcpy_node(node, "cudaGraphMemcpyNodeGetParams")
    out_pointer(pNodeParams, "pNodeParams")
    params = n.params
    if "struct" in params:
        pNodeParams[0] = params["struct"][0]
        return SUCCESS
    ffi().memmove(pNodeParams, bytes(ffi().sizeof("struct cudaMemcpy3DParms")), ffi().sizeof("struct cudaMemcpy3DParms"))
    if "count" in params:  # a 1-D copy: a box one row high
        count = params["count"]
        pNodeParams.srcPtr.ptr = ffi().cast("void *", params["src"])
        pNodeParams.srcPtr.pitch = pNodeParams.srcPtr.xsize = count
        pNodeParams.srcPtr.ysize = 1
        pNodeParams.dstPtr.ptr = ffi().cast("void *", params["dst"])
        pNodeParams.dstPtr.pitch = pNodeParams.dstPtr.xsize = count
        pNodeParams.dstPtr.ysize = 1
        pNodeParams.extent.width, pNodeParams.extent.height, pNodeParams.extent.depth = count, 1, 1
        pNodeParams.kind = params["kind"]
    return SUCCESS


def _set(node, params: dict, work) -> None:
    node.params, node.work = params, work


@cuda()
def cudaGraphMemcpyNodeSetParams(node, pNodeParams):
    _set(_memcpy_node(node, "cudaGraphMemcpyNodeSetParams"), *_memcpy_3d_node(pNodeParams, "cudaGraphMemcpyNodeSetParams"))
    return SUCCESS


@cuda()
def cudaGraphMemcpyNodeSetParams1D(node, dst, src, count, kind):
    _set(_memcpy_node(node, "cudaGraphMemcpyNodeSetParams1D"), *memcpy_1d_node(address(dst), address(src), count, kind))
    return SUCCESS


@cuda()
def cudaGraphMemcpyNodeSetParamsToSymbol(node, symbol, src, count, offset, kind):
    n = _memcpy_node(node, "cudaGraphMemcpyNodeSetParamsToSymbol")
    _set(n, *memcpy_1d_node(_symbol_address(symbol, count, offset, "cudaGraphMemcpyNodeSetParamsToSymbol"),
                            address(src), count, kind))
    return SUCCESS


@cuda()
def cudaGraphMemcpyNodeSetParamsFromSymbol(node, dst, symbol, count, offset, kind):
    n = _memcpy_node(node, "cudaGraphMemcpyNodeSetParamsFromSymbol")
    _set(n, *memcpy_1d_node(address(dst), _symbol_address(symbol, count, offset,
                                                          "cudaGraphMemcpyNodeSetParamsFromSymbol"), count, kind))
    return SUCCESS


# -- memset


def memset_node(dst: int, pitch: int, value: int, element_size: int, width: int, height: int,
                call: str) -> tuple[dict, graphs.Work]:
    """A memset node: `height` rows of `width` elements of `element_size`
    bytes (1, 2 or 4) set to `value` (for both APIs)."""
    if element_size not in (1, 2, 4):
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: elementSize {element_size} (1, 2 or 4)")
    if height > 1 and pitch < width * element_size:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: pitch {pitch} is less than the row's "
                                                         f"{width * element_size} bytes")
    device = rt().device()
    with Recording(device) as recording:
        memset_box(dst, pitch if height > 1 else width * element_size, height, value & (2 ** (8 * element_size) - 1),
                   (width * element_size, height, 1), recording.stream, True, element_size, call)
    params = {"dst": dst, "pitch": pitch, "value": value, "elementSize": element_size, "width": width,
              "height": height}
    return params, recording.work()


def _runtime_memset_node(p, call: str):
    out_pointer(p, "pMemsetParams")
    return memset_node(address(p.dst), p.pitch, p.value, p.elementSize, p.width, p.height, call)


@cuda()
def cudaGraphAddMemsetNode(pGraphNode, graph, pDependencies, numDependencies, pMemsetParams):
    params, work = _runtime_memset_node(pMemsetParams, "cudaGraphAddMemsetNode")
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.MEMSET, params, work)
    return SUCCESS


def _memset_node(node, call: str) -> graphs.Node:
    n = _node(node)
    if n.type != graphs.MEMSET or "elementSize" not in n.params:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: not a memset node")
    return n


@cuda()
def cudaGraphMemsetNodeGetParams(node, pNodeParams):
    params = _memset_node(node, "cudaGraphMemsetNodeGetParams").params
    out_pointer(pNodeParams, "pNodeParams")
    pNodeParams.dst = ffi().cast("void *", params["dst"])
    for name in ("pitch", "value", "elementSize", "width", "height"):
        setattr(pNodeParams, name, params[name])
    return SUCCESS


@cuda()
def cudaGraphMemsetNodeSetParams(node, pNodeParams):
    _set(_memset_node(node, "cudaGraphMemsetNodeSetParams"),
         *_runtime_memset_node(pNodeParams, "cudaGraphMemsetNodeSetParams"))
    return SUCCESS


# -- host


def _host_node(p, call: str) -> tuple[dict, graphs.Work]:
    out_pointer(p, "pNodeParams")
    if p.fn == ffi().NULL:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: fn is NULL")
    return {"fn": p.fn, "userData": p.userData}, host_work(rt().device(), p.fn, p.userData)


@cuda()
def cudaGraphAddHostNode(pGraphNode, graph, pDependencies, numDependencies, pNodeParams):
    params, work = _host_node(pNodeParams, "cudaGraphAddHostNode")
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.HOST, params, work)
    return SUCCESS


def _host(node, call: str) -> graphs.Node:
    n = _node(node)
    if n.type != graphs.HOST:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: not a host node")
    return n


@cuda()
def cudaGraphHostNodeGetParams(node, pNodeParams):
    params = _host(node, "cudaGraphHostNodeGetParams").params
    out_pointer(pNodeParams, "pNodeParams")
    pNodeParams.fn, pNodeParams.userData = params["fn"], params["userData"]
    return SUCCESS


@cuda()
def cudaGraphHostNodeSetParams(node, pNodeParams):
    _set(_host(node, "cudaGraphHostNodeSetParams"), *_host_node(pNodeParams, "cudaGraphHostNodeSetParams"))
    return SUCCESS


# -- child graph, empty, events


@cuda()
def cudaGraphAddChildGraphNode(pGraphNode, graph, pDependencies, numDependencies, childGraph):
    """The child graph is copied into the node, as CUDA does."""
    child = _graph(childGraph, "childGraph")
    if child is _graph(graph):
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphAddChildGraphNode: a graph cannot be its own child")
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.CHILD, {"graph": child.clone()})
    return SUCCESS


@cuda()
def cudaGraphChildGraphNodeGetGraph(node, pGraph):
    n = _node(node)
    if n.type != graphs.CHILD:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphChildGraphNodeGetGraph: not a child graph node")
    out_pointer(pGraph, "pGraph")[0] = ffi().cast("cudaGraph_t", n.params["graph"].handle)
    rt().graphs.graphs.setdefault(n.params["graph"].handle, n.params["graph"])  # the program may query it
    return SUCCESS


@cuda()
def cudaGraphAddEmptyNode(pGraphNode, graph, pDependencies, numDependencies):
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.EMPTY, {})
    return SUCCESS


def _event_node(type_: int, event) -> tuple[dict, graphs.Work]:
    e = rt().streams.event(address(event))
    return {"event": e}, event_work(e, "event_record" if type_ == graphs.EVENT_RECORD else "stream_wait")


@cuda()
def cudaGraphAddEventRecordNode(pGraphNode, graph, pDependencies, numDependencies, event):
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.EVENT_RECORD,
             *_event_node(graphs.EVENT_RECORD, event))
    return SUCCESS


@cuda()
def cudaGraphAddEventWaitNode(pGraphNode, graph, pDependencies, numDependencies, event):
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.WAIT_EVENT,
             *_event_node(graphs.WAIT_EVENT, event))
    return SUCCESS


def _event_of(node, type_: int, call: str) -> graphs.Node:
    n = _node(node)
    if n.type != type_:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: not an event {'record' if type_ == graphs.EVENT_RECORD else 'wait'} node")
    return n


@cuda()
def cudaGraphEventRecordNodeGetEvent(node, event_out):
    out_pointer(event_out, "event_out")[0] = ffi().cast(
        "cudaEvent_t", _event_of(node, graphs.EVENT_RECORD, "cudaGraphEventRecordNodeGetEvent").params["event"].handle)
    return SUCCESS


@cuda()
def cudaGraphEventWaitNodeGetEvent(node, event_out):
    out_pointer(event_out, "event_out")[0] = ffi().cast(
        "cudaEvent_t", _event_of(node, graphs.WAIT_EVENT, "cudaGraphEventWaitNodeGetEvent").params["event"].handle)
    return SUCCESS


@cuda()
def cudaGraphEventRecordNodeSetEvent(node, event):
    _set(_event_of(node, graphs.EVENT_RECORD, "cudaGraphEventRecordNodeSetEvent"),
         *_event_node(graphs.EVENT_RECORD, event))
    return SUCCESS


@cuda()
def cudaGraphEventWaitNodeSetEvent(node, event):
    _set(_event_of(node, graphs.WAIT_EVENT, "cudaGraphEventWaitNodeSetEvent"), *_event_node(graphs.WAIT_EVENT, event))
    return SUCCESS


# -- memory nodes


@cuda()
def cudaGraphAddMemAllocNode(pGraphNode, graph, pDependencies, numDependencies, nodeParams):
    """The memory is allocated now, at the address written back into
    nodeParams->dptr, and stays with the graph (client/graphs.py's
    GraphMemory)."""
    out_pointer(nodeParams, "nodeParams")
    g = _graph(graph)
    location = nodeParams.poolProps.location
    device = rt().device(location.id) if location.id >= 0 else rt().device()
    block = graph_memory(device, nodeParams.bytesize, "cudaGraphAddMemAllocNode")
    try:
        add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.MEM_ALLOC,
                 {"ptr": block.ptr, "size": block.size, "device": device,
                  "props": bytes(ffi().buffer(ffi().addressof(nodeParams.poolProps),
                                              ffi().sizeof("struct cudaMemPoolProps")))})
    except CudaError:
        block.release()
        raise
    g.memory.append(block)
    nodeParams.dptr = ffi().cast("void *", block.ptr)
    return SUCCESS


@cuda()
def cudaGraphMemAllocNodeGetParams(node, params_out):
    n = _node(node)
    if n.type != graphs.MEM_ALLOC:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphMemAllocNodeGetParams: not a memory alloc node")
    out_pointer(params_out, "params_out")
    size = ffi().sizeof("struct cudaMemAllocNodeParams")
    ffi().memmove(params_out, bytes(size), size)
    props = n.params.get("props")
    if props:
        ffi().memmove(ffi().addressof(params_out.poolProps), props, len(props))
    else:
        params_out.poolProps.allocType = ENUMS["cudaMemAllocationType"]["cudaMemAllocationTypePinned"]
        params_out.poolProps.location.type = ENUMS["cudaMemLocationType"]["cudaMemLocationTypeDevice"]
        params_out.poolProps.location.id = n.params["device"].ordinal
    params_out.bytesize = n.params["size"]
    params_out.dptr = ffi().cast("void *", n.params["ptr"])
    return SUCCESS


@cuda()
def cudaGraphAddMemFreeNode(pGraphNode, graph, pDependencies, numDependencies, dptr):
    ptr = address(dptr)
    if ptr not in rt().graphs.memory:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaGraphAddMemFreeNode: {ptr:#x} is not graph memory")
    add_node(pGraphNode, graph, pDependencies, numDependencies, graphs.MEM_FREE, {"ptr": ptr})
    return SUCCESS


@cuda()
def cudaGraphMemFreeNodeGetParams(node, dptr_out):
    n = _node(node)
    if n.type != graphs.MEM_FREE:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphMemFreeNodeGetParams: not a memory free node")
    ffi().cast("void **", out_pointer(dptr_out, "dptr_out"))[0] = ffi().cast("void *", n.params["ptr"])
    return SUCCESS


@cuda()
def cudaDeviceGraphMemTrim(device):
    """Graph memory is freed with the graphs holding it: nothing to trim."""
    rt().device(device)
    return SUCCESS


@cuda()
def cudaDeviceGetGraphMemAttribute(device, attr, value):
    """Used and reserved graph memory are the same here: each alloc node's
    bytes, held by its graph."""
    dev = rt().device(device)
    out_pointer(value, "value")
    if attr not in GRAPH_MEM_ATTRIBUTES.values():
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaDeviceGetGraphMemAttribute: attribute {attr}")
    used = sum(b.size for b in rt().graphs.memory.values() if b.device is dev)
    high = max(getattr(dev, "graph_memory_high", 0), used)
    dev.graph_memory_high = high
    is_high = attr in (GRAPH_MEM_ATTRIBUTES["cudaGraphMemAttrUsedMemHigh"],
                       GRAPH_MEM_ATTRIBUTES["cudaGraphMemAttrReservedMemHigh"])
    ffi().cast("unsigned long long *", value)[0] = high if is_high else used
    return SUCCESS


@cuda()
def cudaDeviceSetGraphMemAttribute(device, attr, value):
    """Only the high watermarks may be set, to 0 (reset), as in CUDA."""
    dev = rt().device(device)
    out_pointer(value, "value")
    if attr not in (GRAPH_MEM_ATTRIBUTES["cudaGraphMemAttrUsedMemHigh"],
                    GRAPH_MEM_ATTRIBUTES["cudaGraphMemAttrReservedMemHigh"]) or \
            ffi().cast("unsigned long long *", value)[0] != 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaDeviceSetGraphMemAttribute: only a high watermark, "
                                                         "reset to 0")
    dev.graph_memory_high = 0
    return SUCCESS


# -- any node type (cudaGraphNodeParams)


def _from_node_params(p, call: str) -> tuple[int, dict, graphs.Work | None]:
    """(type, parameters, work) of a cudaGraphNodeParams, for the types rcuda has."""
    out_pointer(p, "nodeParams")
    type_ = p.type
    if type_ == graphs.KERNEL:
        return (type_, *_runtime_kernel_node(ffi().addressof(p.kernel), call))
    if type_ == graphs.MEMCPY:
        return (type_, *_memcpy_3d_node(ffi().addressof(p.memcpy.copyParams), call))
    if type_ == graphs.MEMSET:
        return (type_, *_runtime_memset_node(ffi().addressof(p.memset), call))
    if type_ == graphs.HOST:
        return (type_, *_host_node(ffi().addressof(p.host), call))
    if type_ == graphs.EMPTY:
        return type_, {}, None
    if type_ in (graphs.EVENT_RECORD, graphs.WAIT_EVENT):
        event = p.eventRecord.event if type_ == graphs.EVENT_RECORD else p.eventWait.event
        return (type_, *_event_node(type_, event))
    if type_ == graphs.CHILD:
        return type_, {"graph": _graph(p.graph.graph, "childGraph").clone()}, None
    if type_ == graphs.MEM_FREE:
        ptr = address(p.free.dptr)
        if ptr not in rt().graphs.memory:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {ptr:#x} is not graph memory")
        return type_, {"ptr": ptr}, None
    raise CudaError(cudaError.cudaErrorNotSupported, f"{call}: nodes of type {graphs.TYPE_NAMES.get(type_, type_)} "
                                                     "are not supported by rcuda")


@cuda()
def cudaGraphAddNode(pGraphNode, graph, pDependencies, dependencyData, numDependencies, nodeParams):
    out_pointer(nodeParams, "nodeParams")
    _check_edge_data(dependencyData, numDependencies)
    if nodeParams.type == graphs.MEM_ALLOC:
        return cudaGraphAddMemAllocNode(pGraphNode, graph, pDependencies, numDependencies,
                                        ffi().cast("struct cudaMemAllocNodeParams *", ffi().addressof(nodeParams.alloc)))
    add_node(pGraphNode, graph, pDependencies, numDependencies, *_from_node_params(nodeParams, "cudaGraphAddNode"))
    return SUCCESS


def set_node_params(node: graphs.Node, type_: int, params: dict, work, call: str) -> None:
    """cudaGraphNodeSetParams and cuGraphNodeSetParams, once the parameters are read."""
    if type_ != node.type:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: the node is a {node.name} node")
    if type_ == graphs.CHILD:
        node.params["graph"].release()
    _set(node, params, work)


@cuda()
def cudaGraphNodeSetParams(node, nodeParams):
    set_node_params(_node(node), *_from_node_params(nodeParams, "cudaGraphNodeSetParams"), "cudaGraphNodeSetParams")
    return SUCCESS


# ------------------------------------------------------------------ executable graphs


def instantiate(graph: Graph, flags: int) -> GraphExec:
    if flags & ~INSTANTIATE_FLAGS:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaGraphInstantiate flags {flags:#x}")
    if flags & DEVICE_LAUNCH:
        raise CudaError(cudaError.cudaErrorNotSupported, "graphs launched from the device are not supported by rcuda")
    graph_exec = GraphExec(graph, flags, rt().new_id, rt().fast)
    return rt().graphs.add_exec(graph_exec)


@cuda()
def cudaGraphInstantiate(pGraphExec, graph, flags):
    out_pointer(pGraphExec, "pGraphExec")
    pGraphExec[0] = ffi().cast("cudaGraphExec_t", instantiate(_graph(graph), flags).handle)
    return SUCCESS


@cuda()
def cudaGraphInstantiateWithFlags(pGraphExec, graph, flags):
    return cudaGraphInstantiate(pGraphExec, graph, flags)


@cuda(stream_variants=True)
def cudaGraphInstantiateWithParams(pGraphExec, graph, instantiateParams, per_thread=False):
    out_pointer(pGraphExec, "pGraphExec")
    p = out_pointer(instantiateParams, "instantiateParams")
    p.errNode_out = ffi().NULL
    try:
        graph_exec = instantiate(_graph(graph), p.flags)
    except CudaError as exc:
        p.result_out = (INSTANTIATE["cudaGraphInstantiateMultipleDevicesNotSupported"]
                        if "more than one GPU" in exc.message else INSTANTIATE["cudaGraphInstantiateInvalidStructure"]
                        if "cycle" in exc.message else INSTANTIATE["cudaGraphInstantiateError"])
        raise
    p.result_out = INSTANTIATE["cudaGraphInstantiateSuccess"]
    pGraphExec[0] = ffi().cast("cudaGraphExec_t", graph_exec.handle)
    if p.flags & 2:  # cudaGraphInstantiateFlagUpload
        upload(graph_exec, stream_of(p.uploadStream, per_thread))
    return SUCCESS


def _exec(handle) -> GraphExec:
    return rt().graphs.exec(address(handle))


def upload(graph_exec: GraphExec, stream=None) -> None:
    """Send the executable's work to its server, if it is not there yet."""
    if graph_exec.on_server or graph_exec.device is None:
        return
    if stream is not None and stream.device is not graph_exec.device:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"the graph's work is on {graph_exec.device.label}, the "
                                                         f"stream on {stream.device.label}")
    import msgpack
    from rcuda import protocol
    blob = msgpack.packb([[dict(header), [bytes(f) for f in frames]] for header, frames in graph_exec.requests],
                         use_bin_type=True)
    graph_exec.device.post("graph_create", protocol.chunks(memoryview(blob)), graph=graph_exec.id)
    graph_exec.on_server = graph_exec.sent = True


def launch(graph_exec: GraphExec, stream) -> None:
    """Run the executable in `stream`: its steps in order (client/graphs.py)."""
    capture = rt().captures.of(stream)
    if capture is not None:  # a launch into a capture is a child graph node
        capture.add(stream, graphs.CHILD, {"graph": graph_exec.graph.clone()})
        return
    if graph_exec.device is not None and stream.device is not graph_exec.device:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaGraphLaunch: the graph's work is on "
                                                         f"{graph_exec.device.label}, the stream on {stream.device.label}")
    upload(graph_exec)
    if graph_exec.one_run and not graph_exec.in_c and graph_exec.on_server:  # C records the next launches
        graph_exec.in_c = True
        rt().fast.graph_ready(graph_exec)
    for step in graph_exec.steps:
        if step.run is not None:
            step.run(stream)
        else:
            stream.device.post("graph_launch", graph=graph_exec.id, stream=stream.id, first=step.first,
                               count=step.count)
            if stream.device.mirrored:  # its kernels may write mapped memory (client/memory/mapped.py)
                rt().fast.mirror_written(stream.device, stream.id)


@cuda(stream_variants=True)
def cudaGraphLaunch(graphExec, stream, per_thread=False):
    launch(_exec(graphExec), stream_of(stream, per_thread))
    return SUCCESS


@cuda(stream_variants=True)
def cudaGraphUpload(graphExec, stream, per_thread=False):
    upload(_exec(graphExec), stream_of(stream, per_thread))
    return SUCCESS


def destroy_exec(handle: int) -> None:
    graph_exec = rt().graphs.pop_exec(handle)
    graph_exec.forget_in_c()
    if graph_exec.sent and graph_exec.device is not None and not graph_exec.device.link.failed:
        graph_exec.device.post("graph_destroy", graph=graph_exec.id)
    graph_exec.graph.release()


@cuda()
def cudaGraphExecDestroy(graphExec):
    destroy_exec(address(graphExec))
    return SUCCESS


@cuda()
def cudaGraphExecGetFlags(graphExec, flags):
    out_pointer(flags, "flags")[0] = _exec(graphExec).flags
    return SUCCESS


def update(graph_exec: GraphExec, graph: Graph) -> tuple[int, graphs.Node | None]:
    """cudaGraphExecUpdate: the executable takes the parameters of `graph`,
    whose topology must be its own.  (result, error node)."""
    if not graphs.same_topology(graph_exec.graph, graph):
        return UPDATE["cudaGraphExecUpdateErrorTopologyChanged"], None
    for mine, theirs in zip(graph_exec.graph.walk(), graph.walk()):
        if mine.type != theirs.type:
            return UPDATE["cudaGraphExecUpdateErrorNodeTypeChanged"], theirs
        if mine.type == graphs.MEM_ALLOC and mine.params["ptr"] != theirs.params["ptr"]:
            return UPDATE["cudaGraphExecUpdateErrorNotSupported"], theirs
    graph_exec.graph.take_parameters(graph)
    graph_exec.plan()
    return UPDATE["cudaGraphExecUpdateSuccess"], None


@cuda()
def cudaGraphExecUpdate(hGraphExec, hGraph, resultInfo):
    out_pointer(resultInfo, "resultInfo")
    result, node = update(_exec(hGraphExec), _graph(hGraph))
    resultInfo.result = result
    resultInfo.errorNode = ffi().cast("cudaGraphNode_t", node.handle if node is not None else 0)
    resultInfo.errorFromNode = ffi().NULL
    if result != UPDATE["cudaGraphExecUpdateSuccess"]:
        raise CudaError(cudaError.cudaErrorGraphExecUpdateFailure,
                        f"cudaGraphExecUpdate: {[k for k, v in UPDATE.items() if v == result][0]}")
    return SUCCESS


def exec_set(graph_exec: GraphExec, node: graphs.Node, type_: int, params: dict, work, call: str) -> None:
    """A per-node update of an executable (cudaGraphExec*NodeSetParams)."""
    target = graph_exec.node_for(node)
    if target.type != type_:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: the node is a {target.name} node")
    target.params, target.work = params, work
    graph_exec.plan()


@cuda()
def cudaGraphExecKernelNodeSetParams(hGraphExec, node, pNodeParams):
    params, work = _runtime_kernel_node(pNodeParams, "cudaGraphExecKernelNodeSetParams")
    exec_set(_exec(hGraphExec), _node(node), graphs.KERNEL, params, work, "cudaGraphExecKernelNodeSetParams")
    return SUCCESS


@cuda()
def cudaGraphExecMemcpyNodeSetParams(hGraphExec, node, pNodeParams):
    params, work = _memcpy_3d_node(pNodeParams, "cudaGraphExecMemcpyNodeSetParams")
    exec_set(_exec(hGraphExec), _node(node), graphs.MEMCPY, params, work, "cudaGraphExecMemcpyNodeSetParams")
    return SUCCESS


@cuda()
def cudaGraphExecMemcpyNodeSetParams1D(hGraphExec, node, dst, src, count, kind):
    params, work = memcpy_1d_node(address(dst), address(src), count, kind)
    exec_set(_exec(hGraphExec), _node(node), graphs.MEMCPY, params, work, "cudaGraphExecMemcpyNodeSetParams1D")
    return SUCCESS


@cuda()
def cudaGraphExecMemcpyNodeSetParamsToSymbol(hGraphExec, node, symbol, src, count, offset, kind):
    call = "cudaGraphExecMemcpyNodeSetParamsToSymbol"
    params, work = memcpy_1d_node(_symbol_address(symbol, count, offset, call), address(src), count, kind)
    exec_set(_exec(hGraphExec), _node(node), graphs.MEMCPY, params, work, call)
    return SUCCESS


@cuda()
def cudaGraphExecMemcpyNodeSetParamsFromSymbol(hGraphExec, node, dst, symbol, count, offset, kind):
    call = "cudaGraphExecMemcpyNodeSetParamsFromSymbol"
    params, work = memcpy_1d_node(address(dst), _symbol_address(symbol, count, offset, call), count, kind)
    exec_set(_exec(hGraphExec), _node(node), graphs.MEMCPY, params, work, call)
    return SUCCESS


@cuda()
def cudaGraphExecMemsetNodeSetParams(hGraphExec, node, pNodeParams):
    params, work = _runtime_memset_node(pNodeParams, "cudaGraphExecMemsetNodeSetParams")
    exec_set(_exec(hGraphExec), _node(node), graphs.MEMSET, params, work, "cudaGraphExecMemsetNodeSetParams")
    return SUCCESS


@cuda()
def cudaGraphExecHostNodeSetParams(hGraphExec, node, pNodeParams):
    params, work = _host_node(pNodeParams, "cudaGraphExecHostNodeSetParams")
    exec_set(_exec(hGraphExec), _node(node), graphs.HOST, params, work, "cudaGraphExecHostNodeSetParams")
    return SUCCESS


@cuda()
def cudaGraphExecEventRecordNodeSetEvent(hGraphExec, hNode, event):
    exec_set(_exec(hGraphExec), _node(hNode), graphs.EVENT_RECORD, *_event_node(graphs.EVENT_RECORD, event),
             "cudaGraphExecEventRecordNodeSetEvent")
    return SUCCESS


@cuda()
def cudaGraphExecEventWaitNodeSetEvent(hGraphExec, hNode, event):
    exec_set(_exec(hGraphExec), _node(hNode), graphs.WAIT_EVENT, *_event_node(graphs.WAIT_EVENT, event),
             "cudaGraphExecEventWaitNodeSetEvent")
    return SUCCESS


@cuda()
def cudaGraphExecChildGraphNodeSetParams(hGraphExec, node, childGraph):
    """The child's topology must be the one instantiated; its parameters
    are taken."""
    graph_exec = _exec(hGraphExec)
    target = graph_exec.node_for(_node(node))
    if target.type != graphs.CHILD:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphExecChildGraphNodeSetParams: not a child graph node")
    child = _graph(childGraph, "childGraph")
    if not graphs.same_topology(target.params["graph"], child):
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphExecChildGraphNodeSetParams: the child graph's "
                                                         "topology differs from the instantiated one")
    target.params["graph"].take_parameters(child)
    graph_exec.plan()
    return SUCCESS


def exec_set_node_params(graph_exec: GraphExec, node: graphs.Node, type_: int, params: dict, work,
                         call: str) -> None:
    """cudaGraphExecNodeSetParams and cuGraphExecNodeSetParams, once the parameters are read."""
    if type_ == graphs.CHILD:
        raise CudaError(cudaError.cudaErrorNotSupported, f"{call} of a child graph node (its "
                                                         "ExecChildGraphNodeSetParams takes a child graph)")
    exec_set(graph_exec, node, type_, params, work, call)


@cuda()
def cudaGraphExecNodeSetParams(graphExec, node, nodeParams):
    call = "cudaGraphExecNodeSetParams"
    exec_set_node_params(_exec(graphExec), _node(node), *_from_node_params(nodeParams, call), call)
    return SUCCESS


ENABLE_TYPES = (graphs.KERNEL, graphs.MEMCPY, graphs.MEMSET)


@cuda()
def cudaGraphNodeSetEnabled(hGraphExec, hNode, isEnabled):
    graph_exec = _exec(hGraphExec)
    target = graph_exec.node_for(_node(hNode))
    if target.type not in ENABLE_TYPES:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphNodeSetEnabled: only kernel, memcpy and memset "
                                                         "nodes can be disabled")
    graph_exec.enabled[target] = bool(isEnabled)
    graph_exec.plan()
    return SUCCESS


@cuda()
def cudaGraphNodeGetEnabled(hGraphExec, hNode, isEnabled):
    graph_exec = _exec(hGraphExec)
    target = graph_exec.node_for(_node(hNode))
    if target.type not in ENABLE_TYPES:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphNodeGetEnabled: only kernel, memcpy and memset "
                                                         "nodes can be disabled")
    out_pointer(isEnabled, "isEnabled")[0] = int(graph_exec.enabled.get(target, True))
    return SUCCESS


# ------------------------------------------------------------------ user objects


@cuda()
def cudaUserObjectCreate(object_out, ptr, destroy, initialRefcount, flags):
    """The destructor runs on the client when the last reference goes (at a
    cudaUserObjectRelease, or when the last graph holding it is destroyed)."""
    out_pointer(object_out, "object_out")
    if destroy == ffi().NULL or initialRefcount == 0 or flags != USER_OBJECT_NO_DESTRUCTOR_SYNC:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaUserObjectCreate: a destructor, a reference, and "
                                                         "cudaUserObjectNoDestructorSync are required")
    table = rt().graphs

    def destroyed():
        table.user_objects.pop(obj.handle, None)
        destroy(ptr)

    obj = table.add_user_object(UserObject(destroyed, initialRefcount))
    object_out[0] = ffi().cast("cudaUserObject_t", obj.handle)
    return SUCCESS


@cuda()
def cudaUserObjectRetain(object, count):
    if count == 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaUserObjectRetain: a count of 0")
    rt().graphs.user_object(address(object)).retain(count)
    return SUCCESS


@cuda()
def cudaUserObjectRelease(object, count):
    if count == 0:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaUserObjectRelease: a count of 0")
    rt().graphs.user_object(address(object)).release(count)
    return SUCCESS


@cuda()
def cudaGraphRetainUserObject(graph, object, count, flags):
    """With cudaGraphUserObjectMove the caller's references pass to the graph."""
    g = _graph(graph)
    obj = rt().graphs.user_object(address(object))
    if count == 0 or flags & ~GRAPH_USER_OBJECT_MOVE:
        raise CudaError(cudaError.cudaErrorInvalidValue, "cudaGraphRetainUserObject: count 0 or unknown flags")
    if not flags & GRAPH_USER_OBJECT_MOVE:
        obj.retain(count)
    g.user_objects[obj] = g.user_objects.get(obj, 0) + count
    return SUCCESS


@cuda()
def cudaGraphReleaseUserObject(graph, object, count):
    g = _graph(graph)
    obj = rt().graphs.user_object(address(object))
    held = g.user_objects.get(obj, 0)
    if count == 0 or count > held:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"cudaGraphReleaseUserObject: releasing {count} of the "
                                                         f"graph's {held} references")
    if held == count:
        del g.user_objects[obj]
    else:
        g.user_objects[obj] = held - count
    obj.release(count)
    return SUCCESS
