"""CUDA driver API: graphs, their nodes, executable graphs, user objects
(cuGraph*, cuUserObject*, cuDeviceGraphMem*).

The driver's face of the runtime's graphs (client/graphs.py): a CUgraph is
a cudaGraph_t, a CUgraphNode a cudaGraphNode_t, a CUgraphExec a
cudaGraphExec_t, so one graph can be built, queried and launched through
both APIs.  Where the driver's arguments have the runtime's layout (host
nodes, events, child graphs, edges, user objects...), the runtime's
function (client/runtime/graphs.py) is called with them; where they differ
(kernel nodes with a CUfunction or a CUkernel and `extra`, CUDA_MEMCPY3D,
CUdeviceptr fields, a CUcontext argument), they are read here and the
runtime's node builders make the node, so a node's work is made one way
whichever API asked.

A node runs on its context's GPU: a kernel node on its CUfunction's (or
on `ctx`'s, for a CUkernel), a memcpy or memset node on the `ctx` given
(NULL: the current context).  Batch memory operation nodes
(cuGraphAddBatchMemOpNode) hold the `stream_mem_ops` request
cuStreamBatchMemOp would post (client/driver/stream_memops.py), checked as
it checks it.

Not here: the generic cuGraphAddNode / cuGraphNodeSetParams /
cuGraphExecNodeSetParams, conditional nodes and external semaphore nodes
(CUDA_ERROR_NOT_SUPPORTED, as the runtime's).
"""
from __future__ import annotations

import contextlib

from rcuda import stream_memops as rules
from rcuda._generated.cuda_enums import ENUMS
from rcuda.driver_errors import CUresult
from rcuda.errors import CudaError, cudaError

from .. import graphs, interposer
from ..capture import Recording
from ..interposer import address, out_pointer
from ..runtime import boxes
from ..runtime import graphs as rg
from .contexts import context_or_current, contexts, handle_of
from .handles import DriverFunction, DriverKernel, handles
from .launch import _launchable, _packer
from .memory import _side
from .registry import SUCCESS, driver, from_runtime, require_initialized
from .stream_memops import _checked, batch_ops
from .streams import check_stream

UPDATE_SUCCESS = ENUMS["cudaGraphExecUpdateResult"]["cudaGraphExecUpdateSuccess"]
MEMCPY_KINDS = ENUMS["cudaMemcpyKind"]


def rt():
    return interposer.rt


def ffi():
    return interposer.ffi


def _forward(runtime_function, *args) -> CUresult:
    """The runtime's function, for a driver function whose arguments have its layout."""
    require_initialized()
    return from_runtime(runtime_function(*args))


def _invalid(call: str, why: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {why}")


@contextlib.contextmanager
def _running_on(device, call: str):
    """The node's work is made for `device`: its context is current while
    it is (a primary context pushed for the call when the current one is
    another GPU's)."""
    current = contexts().current(call)
    if current is not None and current.ordinal == device.ordinal:
        yield device
        return
    contexts().push(contexts().primary(device.ordinal))
    try:
        yield device
    finally:
        contexts().pop()


def _context_device(ctx, call: str):
    """The GPU of a CUcontext argument (NULL: the current context's)."""
    return rt().device(context_or_current(ctx, call).ordinal)


# ------------------------------------------------------------------ graphs, nodes, edges


@driver()
def cuGraphCreate(phGraph, flags):
    return _forward(rg.cudaGraphCreate, phGraph, flags)


@driver()
def cuGraphDestroy(hGraph):
    return _forward(rg.cudaGraphDestroy, hGraph)


@driver()
def cuGraphClone(phGraphClone, originalGraph):
    return _forward(rg.cudaGraphClone, phGraphClone, originalGraph)


@driver()
def cuGraphNodeFindInClone(phNode, hOriginalNode, hClonedGraph):
    return _forward(rg.cudaGraphNodeFindInClone, phNode, hOriginalNode, hClonedGraph)


@driver()
def cuGraphGetNodes(hGraph, nodes, numNodes):
    return _forward(rg.cudaGraphGetNodes, hGraph, nodes, numNodes)


@driver()
def cuGraphGetRootNodes(hGraph, rootNodes, numRootNodes):
    return _forward(rg.cudaGraphGetRootNodes, hGraph, rootNodes, numRootNodes)


@driver()
def cuGraphGetEdges(hGraph, from_, to, numEdges):
    return _forward(rg.cudaGraphGetEdges, hGraph, from_, to, ffi().NULL, numEdges)


@driver()
def cuGraphGetEdges_v2(hGraph, from_, to, edgeData, numEdges):
    return _forward(rg.cudaGraphGetEdges, hGraph, from_, to, edgeData, numEdges)


@driver()
def cuGraphAddDependencies(hGraph, from_, to, numDependencies):
    return _forward(rg.cudaGraphAddDependencies, hGraph, from_, to, ffi().NULL, numDependencies)


@driver()
def cuGraphAddDependencies_v2(hGraph, from_, to, edgeData, numDependencies):
    return _forward(rg.cudaGraphAddDependencies, hGraph, from_, to, edgeData, numDependencies)


@driver()
def cuGraphRemoveDependencies(hGraph, from_, to, numDependencies):
    return _forward(rg.cudaGraphRemoveDependencies, hGraph, from_, to, ffi().NULL, numDependencies)


@driver()
def cuGraphRemoveDependencies_v2(hGraph, from_, to, edgeData, numDependencies):
    return _forward(rg.cudaGraphRemoveDependencies, hGraph, from_, to, edgeData, numDependencies)


@driver()
def cuGraphNodeGetDependencies(hNode, dependencies, numDependencies):
    return _forward(rg.cudaGraphNodeGetDependencies, hNode, dependencies, ffi().NULL, numDependencies)


@driver()
def cuGraphNodeGetDependencies_v2(hNode, dependencies, edgeData, numDependencies):
    return _forward(rg.cudaGraphNodeGetDependencies, hNode, dependencies, edgeData, numDependencies)


@driver()
def cuGraphNodeGetDependentNodes(hNode, dependentNodes, numDependentNodes):
    return _forward(rg.cudaGraphNodeGetDependentNodes, hNode, dependentNodes, ffi().NULL, numDependentNodes)


@driver()
def cuGraphNodeGetDependentNodes_v2(hNode, dependentNodes, edgeData, numDependentNodes):
    return _forward(rg.cudaGraphNodeGetDependentNodes, hNode, dependentNodes, edgeData, numDependentNodes)


@driver()
def cuGraphNodeGetType(hNode, type):
    """CUgraphNodeType numbers the types as cudaGraphNodeType does."""
    return _forward(rg.cudaGraphNodeGetType, hNode, type)


@driver()
def cuGraphDestroyNode(hNode):
    return _forward(rg.cudaGraphDestroyNode, hNode)


@driver()
def cuGraphDebugDotPrint(hGraph, path, flags):
    return _forward(rg.cudaGraphDebugDotPrint, hGraph, path, flags)


# ------------------------------------------------------------------ kernel nodes


def _kernel_node(p, call: str, v2: bool) -> tuple[dict, graphs.Work]:
    """A kernel node from a CUDA_KERNEL_NODE_PARAMS (v2: `kern` and `ctx`
    too): the function's GPU, or `ctx`'s for a CUkernel; parameters as
    cuLaunchKernel takes them (kernelParams or `extra`)."""
    require_initialized()
    out_pointer(p, "nodeParams")
    handle = address(p.func)
    kern = address(p.kern) if v2 else 0
    if not handle and not kern:
        raise _invalid(call, "neither func nor kern names a kernel")
    handle = handle or kern
    function = handles.find(handle, DriverFunction)
    if function is not None:
        device = function.module.device
    elif v2 and handles.find(handle, DriverKernel) is not None:
        device = _context_device(p.ctx, call)
    else:
        device = _context_device(ffi().NULL, call)
    with _running_on(device, call):
        function = _launchable(handle, call)
        args = _packer(function, p.kernelParams, p.extra, call)(function.kernel.params)
        grid, block = (p.gridDimX, p.gridDimY, p.gridDimZ), (p.blockDimX, p.blockDimY, p.blockDimZ)
        params, work = rg.kernel_node(function.kernel, handle, grid, block, p.sharedMemBytes, args)
    params["cu_function"], params["cu_kernel"] = function.handle, kern
    return params, work


def _add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams, v2: bool):
    params, work = _kernel_node(nodeParams, "cuGraphAddKernelNode", v2)
    rg.add_node(phGraphNode, hGraph, dependencies, numDependencies, graphs.KERNEL, params, work)
    return SUCCESS


@driver()
def cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, nodeParams):
    return _add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams, True)


@driver()
def cuGraphAddKernelNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams):
    """CUDA 10's CUDA_KERNEL_NODE_PARAMS, without kern and ctx."""
    return _add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams, False)


def _get_kernel_params(hNode, p, v2: bool):
    require_initialized()
    n = rg._kernel_node(hNode, "cuGraphKernelNodeGetParams")
    out_pointer(p, "nodeParams")
    params = n.params
    p.func = ffi().cast("CUfunction", params.get("cu_function") or params.get("func") or 0)
    p.gridDimX, p.gridDimY, p.gridDimZ = params["grid"]
    p.blockDimX, p.blockDimY, p.blockDimZ = params["block"]
    p.sharedMemBytes = params["shmem"]
    p.kernelParams = rg._argument_pointers(params)
    p.extra = ffi().NULL
    if v2:
        p.kern = ffi().cast("CUkernel", params.get("cu_kernel") or 0)
        device = n.work.device if n.work is not None else None
        p.ctx = handle_of(contexts().primary(device.ordinal) if device is not None else None)
    return SUCCESS


@driver()
def cuGraphKernelNodeGetParams_v2(hNode, nodeParams):
    return _get_kernel_params(hNode, nodeParams, True)


@driver()
def cuGraphKernelNodeGetParams(hNode, nodeParams):
    return _get_kernel_params(hNode, nodeParams, False)


def _set_kernel_params(hNode, p, v2: bool):
    require_initialized()
    n = rg._kernel_node(hNode, "cuGraphKernelNodeSetParams")
    n.params, n.work = _kernel_node(p, "cuGraphKernelNodeSetParams", v2)
    return SUCCESS


@driver()
def cuGraphKernelNodeSetParams_v2(hNode, nodeParams):
    return _set_kernel_params(hNode, nodeParams, True)


@driver()
def cuGraphKernelNodeSetParams(hNode, nodeParams):
    return _set_kernel_params(hNode, nodeParams, False)


@driver()
def cuGraphKernelNodeGetAttribute(hNode, attr, value_out):
    """CUkernelNodeAttrValue is cudaLaunchAttributeValue, the ids the same."""
    return _forward(rg.cudaGraphKernelNodeGetAttribute, hNode, attr, value_out)


@driver()
def cuGraphKernelNodeSetAttribute(hNode, attr, value):
    return _forward(rg.cudaGraphKernelNodeSetAttribute, hNode, attr, value)


@driver()
def cuGraphKernelNodeCopyAttributes(dst, src):
    return _forward(rg.cudaGraphKernelNodeCopyAttributes, dst, src)


# ------------------------------------------------------------------ memcpy nodes


def _copy_node(pCopy, ctx, call: str) -> tuple[dict, graphs.Work]:
    """A memcpy node from a CUDA_MEMCPY3D: its sides read as cuMemcpy3D
    reads them (client/driver/memory.py), the box copied as the runtime's
    memcpy nodes copy one."""
    require_initialized()
    out_pointer(pCopy, "copyParams")
    with _running_on(_context_device(ctx, call), call) as device:
        kept = ffi().new("CUDA_MEMCPY3D *", pCopy[0])
        copy = kept[0]
        extent = (copy.WidthInBytes, copy.Height, copy.Depth)
        dst, src = _side(copy, "dst", extent, call), _side(copy, "src", extent, call)
        params = boxes.box_node_params(dst, src, extent)
        work = boxes.box_work(device, dst, src, extent, call)
    params["cu_struct"] = kept
    params["struct"] = _runtime_copy(copy)  # what cudaGraphMemcpyNodeGetParams answers
    return params, work


def _runtime_copy(copy):
    """A CUDA_MEMCPY3D as the cudaMemcpy3DParms it means (cudaMemcpyDefault)."""
    lib = interposer.lib
    p = ffi().new("struct cudaMemcpy3DParms *")
    element = 1
    for prefix in ("src", "dst"):
        if getattr(copy, prefix + "MemoryType") == lib.CU_MEMORYTYPE_ARRAY:
            element = rt().arrays.get(address(getattr(copy, prefix + "Array")), "a memcpy node").element_size
    for prefix in ("src", "dst"):
        pos = getattr(p, prefix + "Pos")
        x, pos.y, pos.z = getattr(copy, prefix + "XInBytes"), getattr(copy, prefix + "Y"), getattr(copy, prefix + "Z")
        kind = getattr(copy, prefix + "MemoryType")
        if kind == lib.CU_MEMORYTYPE_ARRAY:
            setattr(p, prefix + "Array", ffi().cast("cudaArray_t", getattr(copy, prefix + "Array")))
            pos.x = x // element
            continue
        pos.x = x
        pitched = getattr(p, prefix + "Ptr")
        base = address(getattr(copy, prefix + "Host")) if kind == lib.CU_MEMORYTYPE_HOST else \
            getattr(copy, prefix + "Device")
        pitched.ptr = ffi().cast("void *", base)
        pitched.pitch, pitched.xsize = getattr(copy, prefix + "Pitch"), copy.WidthInBytes
        pitched.ysize = getattr(copy, prefix + "Height")
    p.extent.width, p.extent.height, p.extent.depth = copy.WidthInBytes // element, copy.Height, copy.Depth
    p.kind = MEMCPY_KINDS["cudaMemcpyDefault"]
    return p


#: cudaMemcpyKind -> the CUmemorytype of (source, destination) it means.
_MEMORY_TYPES = {"cudaMemcpyHostToHost": ("HOST", "HOST"), "cudaMemcpyHostToDevice": ("HOST", "DEVICE"),
                 "cudaMemcpyDeviceToHost": ("DEVICE", "HOST"), "cudaMemcpyDeviceToDevice": ("DEVICE", "DEVICE")}


def _driver_copy(params: dict, out) -> None:
    """A runtime memcpy node's copy as a CUDA_MEMCPY3D (zeros for one the
    capture of a copy made, whose parameters CUDA does not give either)."""
    lib = interposer.lib
    size = ffi().sizeof("CUDA_MEMCPY3D")
    ffi().memmove(out, bytes(size), size)
    if "count" in params:  # a 1-D copy
        out.srcMemoryType = out.dstMemoryType = lib.CU_MEMORYTYPE_UNIFIED
        out.srcDevice, out.dstDevice = params["src"], params["dst"]
        out.srcPitch = out.dstPitch = out.WidthInBytes = params["count"]
        out.srcHeight = out.dstHeight = out.Height = out.Depth = 1
        return
    p = params.get("struct")
    if p is None:
        return
    names = {v: k for k, v in MEMCPY_KINDS.items()}
    types = _MEMORY_TYPES.get(names.get(p.kind), ("UNIFIED", "UNIFIED"))
    element = 1
    for prefix, memory_type in zip(("src", "dst"), types):
        pos, array = getattr(p, prefix + "Pos"), address(getattr(p, prefix + "Array"))
        setattr(out, prefix + "Y", pos.y)
        setattr(out, prefix + "Z", pos.z)
        if array:
            element = rt().arrays.get(array, "a memcpy node").element_size
            setattr(out, prefix + "MemoryType", lib.CU_MEMORYTYPE_ARRAY)
            setattr(out, prefix + "Array", ffi().cast("CUarray", array))
            setattr(out, prefix + "XInBytes", pos.x * element)
            continue
        pitched = getattr(p, prefix + "Ptr")
        setattr(out, prefix + "XInBytes", pos.x)
        setattr(out, prefix + "MemoryType", getattr(lib, "CU_MEMORYTYPE_" + memory_type))
        if memory_type == "HOST":
            setattr(out, prefix + "Host", pitched.ptr)
        else:
            setattr(out, prefix + "Device", address(pitched.ptr))
        setattr(out, prefix + "Pitch", pitched.pitch)
        setattr(out, prefix + "Height", pitched.ysize)
    out.WidthInBytes, out.Height, out.Depth = p.extent.width * element, p.extent.height, p.extent.depth


@driver()
def cuGraphAddMemcpyNode(phGraphNode, hGraph, dependencies, numDependencies, copyParams, ctx):
    params, work = _copy_node(copyParams, ctx, "cuGraphAddMemcpyNode")
    rg.add_node(phGraphNode, hGraph, dependencies, numDependencies, graphs.MEMCPY, params, work)
    return SUCCESS


@driver()
def cuGraphMemcpyNodeGetParams(hNode, nodeParams):
    require_initialized()
    n = rg._memcpy_node(hNode, "cuGraphMemcpyNodeGetParams")
    out_pointer(nodeParams, "nodeParams")
    if "cu_struct" in n.params:
        nodeParams[0] = n.params["cu_struct"][0]
    else:
        _driver_copy(n.params, nodeParams)
    return SUCCESS


def _node_device(node: graphs.Node):
    """The GPU a node's work is for (the current one if it has none)."""
    return node.work.device if node.work is not None and node.work.device is not None else rt().device()


def _node_context(node: graphs.Node):
    """A CUcontext naming the node's GPU (for the calls that take none)."""
    return handle_of(contexts().primary(_node_device(node).ordinal))


@driver()
def cuGraphMemcpyNodeSetParams(hNode, nodeParams):
    """On the node's GPU (the call names no context)."""
    require_initialized()
    n = rg._memcpy_node(hNode, "cuGraphMemcpyNodeSetParams")
    n.params, n.work = _copy_node(nodeParams, _node_context(n), "cuGraphMemcpyNodeSetParams")
    return SUCCESS


# ------------------------------------------------------------------ memset nodes
# CUDA_MEMSET_NODE_PARAMS is cudaMemsetParams, dst a CUdeviceptr.


def _memset_params(p):
    return ffi().cast("struct cudaMemsetParams *", p)


@driver()
def cuGraphAddMemsetNode(phGraphNode, hGraph, dependencies, numDependencies, memsetParams, ctx):
    require_initialized()
    with _running_on(_context_device(ctx, "cuGraphAddMemsetNode"), "cuGraphAddMemsetNode"):
        return from_runtime(rg.cudaGraphAddMemsetNode(phGraphNode, hGraph, dependencies, numDependencies,
                                                      _memset_params(memsetParams)))


@driver()
def cuGraphMemsetNodeGetParams(hNode, nodeParams):
    return _forward(rg.cudaGraphMemsetNodeGetParams, hNode, _memset_params(nodeParams))


@driver()
def cuGraphMemsetNodeSetParams(hNode, nodeParams):
    """On the node's GPU (the call names no context)."""
    require_initialized()
    with _running_on(_node_device(rg._node(hNode)), "cuGraphMemsetNodeSetParams"):
        return from_runtime(rg.cudaGraphMemsetNodeSetParams(hNode, _memset_params(nodeParams)))


# ------------------------------------------------------------------ host, child graph, empty, event nodes
# CUDA_HOST_NODE_PARAMS is cudaHostNodeParams; a CUevent a cudaEvent_t.


@driver()
def cuGraphAddHostNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams):
    return _forward(rg.cudaGraphAddHostNode, phGraphNode, hGraph, dependencies, numDependencies, nodeParams)


@driver()
def cuGraphHostNodeGetParams(hNode, nodeParams):
    return _forward(rg.cudaGraphHostNodeGetParams, hNode, nodeParams)


@driver()
def cuGraphHostNodeSetParams(hNode, nodeParams):
    return _forward(rg.cudaGraphHostNodeSetParams, hNode, nodeParams)


@driver()
def cuGraphAddChildGraphNode(phGraphNode, hGraph, dependencies, numDependencies, childGraph):
    return _forward(rg.cudaGraphAddChildGraphNode, phGraphNode, hGraph, dependencies, numDependencies, childGraph)


@driver()
def cuGraphChildGraphNodeGetGraph(hNode, phGraph):
    return _forward(rg.cudaGraphChildGraphNodeGetGraph, hNode, phGraph)


@driver()
def cuGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies):
    return _forward(rg.cudaGraphAddEmptyNode, phGraphNode, hGraph, dependencies, numDependencies)


@driver()
def cuGraphAddEventRecordNode(phGraphNode, hGraph, dependencies, numDependencies, event):
    return _forward(rg.cudaGraphAddEventRecordNode, phGraphNode, hGraph, dependencies, numDependencies, event)


@driver()
def cuGraphAddEventWaitNode(phGraphNode, hGraph, dependencies, numDependencies, event):
    return _forward(rg.cudaGraphAddEventWaitNode, phGraphNode, hGraph, dependencies, numDependencies, event)


@driver()
def cuGraphEventRecordNodeGetEvent(hNode, event_out):
    return _forward(rg.cudaGraphEventRecordNodeGetEvent, hNode, event_out)


@driver()
def cuGraphEventRecordNodeSetEvent(hNode, event):
    return _forward(rg.cudaGraphEventRecordNodeSetEvent, hNode, event)


@driver()
def cuGraphEventWaitNodeGetEvent(hNode, event_out):
    return _forward(rg.cudaGraphEventWaitNodeGetEvent, hNode, event_out)


@driver()
def cuGraphEventWaitNodeSetEvent(hNode, event):
    return _forward(rg.cudaGraphEventWaitNodeSetEvent, hNode, event)


# ------------------------------------------------------------------ memory nodes
# CUDA_MEM_ALLOC_NODE_PARAMS is cudaMemAllocNodeParams, dptr a CUdeviceptr.


def _alloc_params(p):
    return ffi().cast("struct cudaMemAllocNodeParams *", p)


@driver()
def cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams):
    return _forward(rg.cudaGraphAddMemAllocNode, phGraphNode, hGraph, dependencies, numDependencies,
                    _alloc_params(nodeParams))


@driver()
def cuGraphMemAllocNodeGetParams(hNode, params_out):
    return _forward(rg.cudaGraphMemAllocNodeGetParams, hNode, _alloc_params(params_out))


@driver()
def cuGraphAddMemFreeNode(phGraphNode, hGraph, dependencies, numDependencies, dptr):
    return _forward(rg.cudaGraphAddMemFreeNode, phGraphNode, hGraph, dependencies, numDependencies, dptr)


@driver()
def cuGraphMemFreeNodeGetParams(hNode, dptr_out):
    return _forward(rg.cudaGraphMemFreeNodeGetParams, hNode, dptr_out)


@driver()
def cuDeviceGraphMemTrim(device):
    return _forward(rg.cudaDeviceGraphMemTrim, device)


@driver()
def cuDeviceGetGraphMemAttribute(device, attr, value):
    """CUgraphMem_attribute numbers the attributes as cudaGraphMemAttributeType does."""
    return _forward(rg.cudaDeviceGetGraphMemAttribute, device, attr, value)


@driver()
def cuDeviceSetGraphMemAttribute(device, attr, value):
    return _forward(rg.cudaDeviceSetGraphMemAttribute, device, attr, value)


# ------------------------------------------------------------------ batch memory operation nodes


def _batch_node(p, call: str) -> tuple[dict, graphs.Work]:
    """The `stream_mem_ops` request cuStreamBatchMemOp would post into a
    stream of `ctx`'s GPU, checked as it checks it, recorded."""
    require_initialized()
    out_pointer(p, "nodeParams")
    if p.flags:
        raise _invalid(call, f"flags {p.flags:#x} (must be 0)")
    if p.count == 0:
        raise _invalid(call, "count is 0")
    context = context_or_current(p.ctx, call)
    device = rt().device(context.ordinal)
    ops = [_checked(call, op, device) for op in batch_ops(call, p.count, p.paramArray)]
    kept = ffi().new("CUstreamBatchMemOpParams[]", p.count)
    ffi().memmove(kept, p.paramArray, ffi().sizeof("CUstreamBatchMemOpParams") * p.count)
    with Recording(device) as recording:
        device.post("stream_mem_ops", stream=recording.stream.id, ops=ops)
    return {"ops": ops, "count": p.count, "array": kept, "context": context}, recording.work()


def _batch_of(hNode, call: str) -> graphs.Node:
    n = rg._node(hNode)
    if n.type != graphs.BATCH_MEM_OP:
        raise _invalid(call, "not a batch memory operation node")
    return n


@driver()
def cuGraphAddBatchMemOpNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams):
    params, work = _batch_node(nodeParams, "cuGraphAddBatchMemOpNode")
    rg.add_node(phGraphNode, hGraph, dependencies, numDependencies, graphs.BATCH_MEM_OP, params, work)
    return SUCCESS


@driver()
def cuGraphBatchMemOpNodeGetParams(hNode, nodeParams_out):
    """A captured cuStreamBatchMemOp's node answers its operations too."""
    require_initialized()
    n = _batch_of(hNode, "cuGraphBatchMemOpNodeGetParams")
    out_pointer(nodeParams_out, "nodeParams_out")
    params = n.params
    if "array" not in params:  # captured: the request's operations
        ops = params.get("ops", [])
        kept = ffi().new("CUstreamBatchMemOpParams[]", max(len(ops), 1))
        for i, (kind, addr, value, flags) in enumerate(ops):
            kept[i].operation = kind
            if kind in rules.WIDTH:  # waits and writes: the same layout
                kept[i].writeValue.address, kept[i].writeValue.flags = addr, flags
                kept[i].writeValue.value64 = value
            else:
                kept[i].memoryBarrier.flags = flags
        params["array"], params["count"] = kept, len(ops)
        params["context"] = contexts().primary(_node_device(n).ordinal)
    nodeParams_out.ctx = handle_of(params["context"])
    nodeParams_out.count = params["count"]
    nodeParams_out.paramArray = params["array"]
    nodeParams_out.flags = 0
    return SUCCESS


@driver()
def cuGraphBatchMemOpNodeSetParams(hNode, nodeParams):
    require_initialized()
    n = _batch_of(hNode, "cuGraphBatchMemOpNodeSetParams")
    n.params, n.work = _batch_node(nodeParams, "cuGraphBatchMemOpNodeSetParams")
    return SUCCESS


# ------------------------------------------------------------------ executable graphs


@driver()
def cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags):
    """CUDA_GRAPH_INSTANTIATE_FLAG_* are the runtime's flags."""
    return _forward(rg.cudaGraphInstantiateWithFlags, phGraphExec, hGraph, flags)


def _instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize):
    """CUDA 10's cuGraphInstantiate: a failure's reason in logBuffer."""
    require_initialized()
    out_pointer(phGraphExec, "phGraphExec")
    if phErrorNode != ffi().NULL:
        phErrorNode[0] = ffi().NULL
    if logBuffer != ffi().NULL and bufferSize:
        logBuffer[0] = b"\0"
    try:
        graph_exec = rg.instantiate(rg._graph(hGraph), 0)
    except CudaError as exc:
        if logBuffer != ffi().NULL and bufferSize:
            text = exc.message.encode()[:bufferSize - 1] + b"\0"
            ffi().memmove(logBuffer, text, len(text))
        raise
    phGraphExec[0] = ffi().cast("CUgraphExec", graph_exec.handle)
    return SUCCESS


@driver()
def cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize):
    return _instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize)


@driver()
def cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize):
    return _instantiate_with_log(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize)


@driver(stream_variants=True)
def cuGraphInstantiateWithParams(phGraphExec, hGraph, instantiateParams, per_thread=False):
    """CUDA_GRAPH_INSTANTIATE_PARAMS is cudaGraphInstantiateParams."""
    if instantiateParams != ffi().NULL and instantiateParams.flags & 2:  # ..._FLAG_UPLOAD: a stream of the context
        check_stream(instantiateParams.hUploadStream, "cuGraphInstantiateWithParams")
    return from_runtime(rg.cudaGraphInstantiateWithParams(
        phGraphExec, hGraph, ffi().cast("cudaGraphInstantiateParams *", instantiateParams), per_thread))


@driver(stream_variants=True)
def cuGraphLaunch(hGraphExec, hStream, per_thread=False):
    check_stream(hStream, "cuGraphLaunch")
    return from_runtime(rg.cudaGraphLaunch(hGraphExec, hStream, per_thread))


@driver(stream_variants=True)
def cuGraphUpload(hGraphExec, hStream, per_thread=False):
    check_stream(hStream, "cuGraphUpload")
    return from_runtime(rg.cudaGraphUpload(hGraphExec, hStream, per_thread))


@driver()
def cuGraphExecDestroy(hGraphExec):
    return _forward(rg.cudaGraphExecDestroy, hGraphExec)


@driver()
def cuGraphExecGetFlags(hGraphExec, flags):
    return _forward(rg.cudaGraphExecGetFlags, hGraphExec, flags)


@driver()
def cuGraphExecUpdate_v2(hGraphExec, hGraph, resultInfo):
    """CUgraphExecUpdateResultInfo is cudaGraphExecUpdateResultInfo, the results numbered alike."""
    return _forward(rg.cudaGraphExecUpdate, hGraphExec, hGraph,
                    ffi().cast("cudaGraphExecUpdateResultInfo *", resultInfo))


@driver()
def cuGraphExecUpdate(hGraphExec, hGraph, hErrorNode_out, updateResult_out):
    """CUDA 11's: the error node and the result in two outputs."""
    require_initialized()
    out_pointer(hErrorNode_out, "hErrorNode_out")
    out_pointer(updateResult_out, "updateResult_out")
    result, node = rg.update(rg._exec(hGraphExec), rg._graph(hGraph))
    hErrorNode_out[0] = ffi().cast("CUgraphNode", node.handle if node is not None else 0)
    updateResult_out[0] = result
    if result != UPDATE_SUCCESS:
        raise CudaError(cudaError.cudaErrorGraphExecUpdateFailure, f"cuGraphExecUpdate: update result {result}")
    return SUCCESS


def _exec_set(hGraphExec, hNode, type_: int, made, call: str):
    require_initialized()
    params, work = made
    rg.exec_set(rg._exec(hGraphExec), rg._node(hNode), type_, params, work, call)
    return SUCCESS


@driver()
def cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, nodeParams):
    call = "cuGraphExecKernelNodeSetParams"
    return _exec_set(hGraphExec, hNode, graphs.KERNEL, _kernel_node(nodeParams, call, True), call)


@driver()
def cuGraphExecKernelNodeSetParams(hGraphExec, hNode, nodeParams):
    call = "cuGraphExecKernelNodeSetParams"
    return _exec_set(hGraphExec, hNode, graphs.KERNEL, _kernel_node(nodeParams, call, False), call)


@driver()
def cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, copyParams, ctx):
    call = "cuGraphExecMemcpyNodeSetParams"
    return _exec_set(hGraphExec, hNode, graphs.MEMCPY, _copy_node(copyParams, ctx, call), call)


@driver()
def cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, memsetParams, ctx):
    require_initialized()
    with _running_on(_context_device(ctx, "cuGraphExecMemsetNodeSetParams"), "cuGraphExecMemsetNodeSetParams"):
        return from_runtime(rg.cudaGraphExecMemsetNodeSetParams(hGraphExec, hNode, _memset_params(memsetParams)))


@driver()
def cuGraphExecBatchMemOpNodeSetParams(hGraphExec, hNode, nodeParams):
    call = "cuGraphExecBatchMemOpNodeSetParams"
    return _exec_set(hGraphExec, hNode, graphs.BATCH_MEM_OP, _batch_node(nodeParams, call), call)


@driver()
def cuGraphExecHostNodeSetParams(hGraphExec, hNode, nodeParams):
    return _forward(rg.cudaGraphExecHostNodeSetParams, hGraphExec, hNode, nodeParams)


@driver()
def cuGraphExecChildGraphNodeSetParams(hGraphExec, hNode, childGraph):
    return _forward(rg.cudaGraphExecChildGraphNodeSetParams, hGraphExec, hNode, childGraph)


@driver()
def cuGraphExecEventRecordNodeSetEvent(hGraphExec, hNode, event):
    return _forward(rg.cudaGraphExecEventRecordNodeSetEvent, hGraphExec, hNode, event)


@driver()
def cuGraphExecEventWaitNodeSetEvent(hGraphExec, hNode, event):
    return _forward(rg.cudaGraphExecEventWaitNodeSetEvent, hGraphExec, hNode, event)


@driver()
def cuGraphNodeSetEnabled(hGraphExec, hNode, isEnabled):
    return _forward(rg.cudaGraphNodeSetEnabled, hGraphExec, hNode, isEnabled)


@driver()
def cuGraphNodeGetEnabled(hGraphExec, hNode, isEnabled):
    return _forward(rg.cudaGraphNodeGetEnabled, hGraphExec, hNode, isEnabled)


# ------------------------------------------------------------------ user objects


@driver()
def cuUserObjectCreate(object_out, ptr, destroy, initialRefcount, flags):
    """CU_USER_OBJECT_NO_DESTRUCTOR_SYNC is cudaUserObjectNoDestructorSync."""
    return _forward(rg.cudaUserObjectCreate, object_out, ptr, destroy, initialRefcount, flags)


@driver()
def cuUserObjectRetain(object, count):
    return _forward(rg.cudaUserObjectRetain, object, count)


@driver()
def cuUserObjectRelease(object, count):
    return _forward(rg.cudaUserObjectRelease, object, count)


@driver()
def cuGraphRetainUserObject(graph, object, count, flags):
    return _forward(rg.cudaGraphRetainUserObject, graph, object, count, flags)


@driver()
def cuGraphReleaseUserObject(graph, object, count):
    return _forward(rg.cudaGraphReleaseUserObject, graph, object, count)


# ------------------------------------------------------------------ any node type (CUgraphNodeParams)


def _from_node_params(p, call: str) -> tuple[int, dict, graphs.Work | None]:
    """(type, parameters, work) of a CUgraphNodeParams: the driver's kinds
    read here (a kernel v3, a memcpy or memset with its context, a batch of
    memory operations), the others, laid out as the runtime's, by the
    runtime's reader."""
    require_initialized()
    out_pointer(p, "nodeParams")
    type_ = p.type
    if type_ == graphs.KERNEL:
        return (type_, *_kernel_node(ffi().addressof(p.kernel), call, True))
    if type_ == graphs.MEMCPY:
        return (type_, *_copy_node(ffi().addressof(p.memcpy.copyParams), p.memcpy.copyCtx, call))
    if type_ == graphs.MEMSET:
        m = p.memset
        with _running_on(_context_device(m.ctx, call), call):
            return (type_, *rg.memset_node(int(m.dst), m.pitch, m.value, m.elementSize, m.width, m.height, call))
    if type_ == graphs.BATCH_MEM_OP:
        return (type_, *_batch_node(ffi().addressof(p.memOp), call))
    return rg._from_node_params(ffi().cast("struct cudaGraphNodeParams *", p), call)


@driver()
def cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams):
    require_initialized()
    out_pointer(nodeParams, "nodeParams")
    rg._check_edge_data(ffi().cast("cudaGraphEdgeData *", dependencyData), numDependencies)
    if nodeParams.type == graphs.MEM_ALLOC:
        return _forward(rg.cudaGraphAddMemAllocNode, phGraphNode, hGraph, dependencies, numDependencies,
                        _alloc_params(ffi().addressof(nodeParams.alloc)))
    rg.add_node(phGraphNode, hGraph, dependencies, numDependencies, *_from_node_params(nodeParams, "cuGraphAddNode"))
    return SUCCESS


@driver()
def cuGraphAddNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams):
    return cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, ffi().NULL, numDependencies, nodeParams)


@driver()
def cuGraphNodeSetParams(hNode, nodeParams):
    rg.set_node_params(rg._node(hNode), *_from_node_params(nodeParams, "cuGraphNodeSetParams"), "cuGraphNodeSetParams")
    return SUCCESS


@driver()
def cuGraphExecNodeSetParams(hGraphExec, hNode, nodeParams):
    call = "cuGraphExecNodeSetParams"
    rg.exec_set_node_params(rg._exec(hGraphExec), rg._node(hNode), *_from_node_params(nodeParams, call), call)
    return SUCCESS
