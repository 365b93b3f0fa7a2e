"""CUDA graphs as the program holds them: graphs, their nodes, executable
graphs and user objects, for both APIs (cudaGraph* and cuGraph* are two
faces of these objects).

A graph is kept here, in the client: its nodes, their parameters and their
dependencies, so every query (nodes, edges, parameters, clones, the DOT
dump) is answered without a round trip.  What the server gets is an
executable graph's work: at instantiation each node on a device becomes the
requests its stream operation would send (a `launch`, a `memset`, a
`dtod`, an `event_record`, ...), recorded once, when the node is made
(`Recording`), and the server keeps the list (`graph_create`).  A
`graph_launch` then runs the list in one of the program's streams, so a
launched graph costs one message however many nodes it has.

What cannot live on the server stays here and runs in graph order at each
launch, in the same stream:
  * host nodes, like host functions in a stream (client/callbacks.py);
  * copies that touch host memory, made when the graph runs, not when the
    node was made: a copy from pinned memory reads it when its turn comes in
    the stream (after the host nodes before it), one from pageable memory
    when cudaGraphLaunch is called; a copy into host memory lands before the
    nodes after it run.
A launch with such nodes is cut into runs of server work between them, one
`graph_launch` each.

Nodes run in an order that honours every dependency (the graph's nodes
sorted topologically, in the order they were added where the graph leaves
it free), one after the other in the launch's stream: branches a GPU might
overlap run in turn.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import weakref
from dataclasses import dataclass, field

from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError

NODE_TYPES = ENUMS["cudaGraphNodeType"]
KERNEL, MEMCPY, MEMSET, HOST = (NODE_TYPES[f"cudaGraphNodeType{n}"] for n in ("Kernel", "Memcpy", "Memset", "Host"))
CHILD, EMPTY, WAIT_EVENT, EVENT_RECORD = (NODE_TYPES[f"cudaGraphNodeType{n}"]
                                          for n in ("Graph", "Empty", "WaitEvent", "EventRecord"))
MEM_ALLOC, MEM_FREE = NODE_TYPES["cudaGraphNodeTypeMemAlloc"], NODE_TYPES["cudaGraphNodeTypeMemFree"]
#: The driver's CU_GRAPH_NODE_TYPE_BATCH_MEM_OP (the runtime has no name for it).
BATCH_MEM_OP = 12
TYPE_NAMES = {value: name.removeprefix("cudaGraphNodeType") for name, value in NODE_TYPES.items()}
TYPE_NAMES[BATCH_MEM_OP] = "BatchMemOp"

# Handles are values no allocator hands out (see client/streams.py).
GRAPH_HANDLES_FROM = 0x5B00_0000_0000
NODE_HANDLES_FROM = 0x5B10_0000_0000
EXEC_HANDLES_FROM = 0x5B20_0000_0000
USER_OBJECT_HANDLES_FROM = 0x5B30_0000_0000

_handles = {
    "graph": itertools.count(GRAPH_HANDLES_FROM, 0x10),
    "node": itertools.count(NODE_HANDLES_FROM, 0x10),
    "exec": itertools.count(EXEC_HANDLES_FROM, 0x10),
    "user object": itertools.count(USER_OBJECT_HANDLES_FROM, 0x10),
}


#: Every live node by handle (nodes of graphs and of executable graphs).
_nodes: "weakref.WeakValueDictionary[int, Node]" = weakref.WeakValueDictionary()


def invalid(message: str) -> CudaError:
    return CudaError(cudaError.cudaErrorInvalidValue, message)


@dataclass(eq=False)
class Work:
    """What a node does when its graph runs.  `requests` (header, frames)
    for its device's server, with the stream to be the launch's; or `run`,
    called with the launch's Stream, for work the client does itself (a
    host node, a copy touching host memory)."""

    device: object = None
    requests: list = field(default_factory=list)
    run: object = None            # callable(stream) -> None
    writes_host: bool = False     # lands bytes in host memory (a copy to the host)


@dataclass(eq=False)
class Node:
    handle: int
    graph: "Graph"
    type: int
    params: dict                  # what the node's Get/SetParams speak of
    work: Work | None = None      # None: nothing to run (empty, memory nodes, a child graph)
    deps: list = field(default_factory=list)     # the nodes it depends on, in the order given
    origin: "Node | None" = None  # the node it was cloned from (cudaGraphNodeFindInClone)
    removed: bool = False         # cudaGraphDestroyNode

    @property
    def name(self) -> str:
        return TYPE_NAMES.get(self.type, str(self.type))


def _new_node(graph, type_: int, params: dict, work, deps: list, origin=None) -> Node:
    node = Node(next(_handles["node"]), graph, type_, params, work, deps, origin)
    _nodes[node.handle] = node
    return node


class Graph:
    def __init__(self, flags: int = 0):
        self.handle = next(_handles["graph"])
        self.flags = flags
        self.nodes: list[Node] = []
        self.user_objects: dict = {}  # UserObject -> references this graph holds
        self.destroyed = False
        self.memory: list = []        # GraphMemory blocks its alloc nodes made

    # ---------------------------------------------------------- nodes, edges

    def add(self, type_: int, params: dict, deps, work: Work | None = None) -> Node:
        deps = self.own_nodes(deps, "dependency")
        if len(set(deps)) != len(deps):
            raise invalid("a dependency is given twice")
        node = _new_node(self, type_, params, work, list(deps))
        self.nodes.append(node)
        return node

    def own_nodes(self, nodes, what: str) -> list[Node]:
        for node in nodes:
            if node.graph is not self or node.removed:
                raise invalid(f"{what} node {node.handle:#x} belongs to another graph (or was destroyed)")
        return list(nodes)

    def dependents(self, node: Node) -> list[Node]:
        return [n for n in self.nodes if node in n.deps]

    def edges(self) -> list[tuple[Node, Node]]:
        return [(dep, node) for node in self.nodes for dep in node.deps]

    def roots(self) -> list[Node]:
        return [n for n in self.nodes if not n.deps]

    def add_edges(self, pairs) -> None:
        for source, target in pairs:
            self.own_nodes((source, target), "edge")
            if source is target or source in target.deps:
                raise invalid("the edge exists already, or joins a node to itself")
        for source, target in pairs:
            target.deps.append(source)

    def remove_edges(self, pairs) -> None:
        for source, target in pairs:
            self.own_nodes((source, target), "edge")
            if source not in target.deps:
                raise invalid(f"no edge from node {source.handle:#x} to {target.handle:#x}")
        for source, target in pairs:
            target.deps.remove(source)

    def remove(self, node: Node) -> None:
        self.own_nodes((node,), "destroyed")
        self.nodes.remove(node)
        node.removed = True
        for other in self.nodes:
            if node in other.deps:
                other.deps.remove(node)

    def ordered(self) -> list[Node]:
        """The nodes in an order that honours every dependency, the order
        they were added where the graph leaves it free; a cycle is an error
        (cudaErrorInvalidValue, as cudaGraphInstantiate gives)."""
        position = {node: i for i, node in enumerate(self.nodes)}
        waiting = {node: len(node.deps) for node in self.nodes}
        dependents: dict[Node, list[Node]] = {node: [] for node in self.nodes}
        for node in self.nodes:
            for dep in node.deps:
                dependents[dep].append(node)
        ready = [position[n] for n in self.nodes if not n.deps]  # a heap of positions
        heapq.heapify(ready)
        order = []
        while ready:
            node = self.nodes[heapq.heappop(ready)]
            order.append(node)
            for after in dependents[node]:
                waiting[after] -= 1
                if waiting[after] == 0:
                    heapq.heappush(ready, position[after])
        if len(order) != len(self.nodes):
            raise invalid(f"the graph has a cycle through {len(self.nodes) - len(order)} of its nodes")
        return order

    def clone(self) -> "Graph":
        """A copy with new nodes (each remembers its original) and the same
        edges; child graphs are copied too."""
        copy = Graph(self.flags)
        made: dict[Node, Node] = {}
        for node in self.nodes:
            params = dict(node.params)
            if node.type == CHILD:
                params["graph"] = node.params["graph"].clone()
            made[node] = _new_node(copy, node.type, params, node.work, [], origin=node)
        for node in self.nodes:
            made[node].deps = [made[dep] for dep in node.deps]
        copy.nodes = [made[node] for node in self.nodes]
        copy.memory = list(self.memory)
        for block in copy.memory:
            block.owners += 1
        for obj, count in self.user_objects.items():
            obj.retain(count)
            copy.user_objects[obj] = count
        return copy

    def walk(self):
        """Every node, each child graph's after its node."""
        for node in self.nodes:
            yield node
            if node.type == CHILD:
                yield from node.params["graph"].walk()

    def take_parameters(self, other: "Graph") -> None:
        """Each node takes the parameters and work of `other`'s node in its
        place (a graph of the same topology: same_topology)."""
        for mine, theirs in zip(self.walk(), other.walk()):
            if mine.type != CHILD:
                mine.params, mine.work = dict(theirs.params), theirs.work

    def find_clone_of(self, original: Node) -> Node | None:
        return next((n for n in self.nodes if n.origin is original), None)

    def dot(self, verbose: bool = False) -> str:
        """Graphviz text (cudaGraphDebugDotPrint): a box per node, an arrow
        per dependency, a child graph as a cluster."""
        lines = ["digraph rcuda_graph {", "  rankdir=TB;"]
        self._dot_body(lines, "  ", verbose)
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _dot_body(self, lines: list, indent: str, verbose: bool) -> None:
        for i, node in enumerate(self.nodes):
            label = f"{node.name}\\n{describe(node)}" if verbose else node.name
            lines.append(f'{indent}"n{node.handle:x}" [shape=box, label="{i}: {label}"];')
            if node.type == CHILD:
                lines.append(f'{indent}subgraph "cluster_{node.handle:x}" {{')
                lines.append(f'{indent}  label="child of {i}";')
                node.params["graph"]._dot_body(lines, indent + "  ", verbose)
                lines.append(f"{indent}}}")
        for source, target in self.edges():
            lines.append(f'{indent}"n{source.handle:x}" -> "n{target.handle:x}";')

    # ---------------------------------------------------------- lifetime

    def release(self) -> None:
        """cudaGraphDestroy: its nodes go, its memory and user objects are
        released once nothing instantiated from it holds them."""
        self.destroyed = True
        for block in self.memory:
            block.release()
        for obj, count in self.user_objects.items():
            obj.release(count)
        self.user_objects.clear()
        for node in self.nodes:
            if node.type == CHILD:
                node.params["graph"].release()


def describe(node: Node) -> str:
    params = node.params
    if node.type == KERNEL:
        return f"{params.get('name', '?')} grid {tuple(params['grid'])} block {tuple(params['block'])}"
    if node.type == MEMSET:
        return f"{params['width']}x{params['height']} of {params['value']:#x} at {params['dst']:#x}"
    if node.type == MEMCPY:
        return params.get("summary", "copy")
    if node.type in (MEM_ALLOC, MEM_FREE):
        return f"{params['ptr']:#x}"
    return ""


class GraphMemory:
    """Device memory an alloc node made (cudaGraphAddMemAllocNode, or a
    cudaMallocAsync captured).  Its address is fixed when the node is made
    and it stays allocated while any graph or executable graph holding the
    node lives: a free node, or cudaFree/cudaFreeAsync of it outside the
    graph, ends its use, not its memory (the same bytes serve the next
    launch)."""

    def __init__(self, ptr: int, size: int, device, on_last_release):
        self.ptr, self.size, self.device = ptr, size, device
        self.owners = 1
        self._on_last_release = on_last_release

    def release(self) -> None:
        self.owners -= 1
        if self.owners == 0:
            self._on_last_release(self)


class UserObject:
    """cudaUserObjectCreate: a destructor run when the last reference goes
    (on the client, like a host function)."""

    def __init__(self, destroy, references: int):
        self.handle = next(_handles["user object"])
        self._destroy = destroy
        self._lock = threading.Lock()
        self.references = references

    def retain(self, count: int) -> None:
        with self._lock:
            self.references += count

    def release(self, count: int) -> None:
        with self._lock:
            if count > self.references:
                raise invalid(f"user object {self.handle:#x}: releasing {count} of {self.references} references")
            self.references -= count
            last = self.references == 0
        if last:
            self._destroy()


@dataclass(eq=False)
class Step:
    """A piece of a launch: a run of server work (`first`, `count` into
    the executable's requests) or client work (`run`)."""

    first: int = 0
    count: int = 0
    run: object = None
    downloads: bool = False  # its server work includes copies into host memory


class GraphExec:
    """An executable graph: a snapshot of a graph (later changes to the
    graph do not reach it), its work for one device in dependency order,
    and the id the server keeps that work under."""

    def __init__(self, graph: Graph, flags: int, new_id, fast=None):
        self.handle = next(_handles["exec"])
        self.fast = fast             # C's fast path: it records launches of a graph that is one run on its server
        self.in_c = False
        self.flags = flags
        self.graph = graph.clone()   # nodes know their originals: per-node updates find them
        self.id = new_id()
        self.device = None
        self.requests: list = []
        self.steps: list[Step] = []
        self.enabled: dict[Node, bool] = {}
        self.on_server = False       # the server holds the current requests
        self.sent = False            # the server has (had) work of it: destroy it there too
        self.plan()

    def node_for(self, original: Node) -> Node:
        """The executable's node instantiated from `original` (a node of the
        graph it was made from)."""
        for node in self.graph.walk():
            if node.origin is original or node is original:
                return node
        raise invalid(f"node {original.handle:#x} is not in the graph this executable was instantiated from")

    def plan(self) -> None:
        """Order the nodes and cut the work into steps (see the module
        docstring).  Graph memory nodes and empty ones do nothing here."""
        self.forget_in_c()
        requests, steps, devices = [], [], set()
        current = Step()
        for node in _flattened(self.graph):
            work = node.work
            if work is None or not self.enabled.get(node, True):
                continue
            if work.run is not None:
                if current.count:
                    steps.append(current)
                steps.append(Step(run=work.run))
                current = Step(first=len(requests))
                if work.device is not None:
                    devices.add(work.device)
                continue
            devices.add(work.device)
            requests.extend(work.requests)
            current.count += len(work.requests)
            current.downloads = current.downloads or work.writes_host
        if current.count:
            steps.append(current)
        if len(devices) > 1:
            raise CudaError(cudaError.cudaErrorNotSupported,
                            "a graph with work on more than one GPU cannot be instantiated by rcuda")
        device = next(iter(devices), None)
        if self.device is not None and device is not None and device is not self.device:
            raise CudaError(cudaError.cudaErrorInvalidValue, "the update moves the graph's work to another GPU")
        self.device = self.device or device
        self.requests, self.steps = requests, steps
        self.on_server = False


    @property
    def one_run(self) -> bool:
        """Whether a launch is one run of server work, the whole of it."""
        return len(self.steps) == 1 and self.steps[0].run is None and self.steps[0].count == len(self.requests)

    def forget_in_c(self) -> None:
        """C no longer records its launches (its work changes, or it goes)."""
        if self.in_c:
            self.in_c = False
            self.fast.graph_gone(self)


def _flattened(graph: Graph) -> list[Node]:
    """The graph's nodes in dependency order, each child graph's in its
    place."""
    nodes = []
    for node in graph.ordered():
        if node.type == CHILD:
            nodes.extend(_flattened(node.params["graph"]))
        else:
            nodes.append(node)
    return nodes


def same_topology(a: Graph, b: Graph) -> bool:
    """Whether `b` can update an executable of `a` (cudaGraphExecUpdate):
    the same number of nodes of the same types, with the same edges, node
    by node in the order they were added."""
    if len(a.nodes) != len(b.nodes):
        return False
    index_a = {n: i for i, n in enumerate(a.nodes)}
    index_b = {n: i for i, n in enumerate(b.nodes)}
    for x, y in zip(a.nodes, b.nodes):
        if x.type != y.type or sorted(index_a[d] for d in x.deps) != sorted(index_b[d] for d in y.deps):
            return False
        if x.type == CHILD and not same_topology(x.params["graph"], y.params["graph"]):
            return False
    return True


class GraphTable:
    """Every graph, node, executable graph and user object of the process,
    by handle."""

    def __init__(self):
        self._lock = threading.Lock()
        self.graphs: dict[int, Graph] = {}
        self.execs: dict[int, GraphExec] = {}
        self.user_objects: dict[int, UserObject] = {}
        self.memory: dict[int, GraphMemory] = {}   # graph allocations by address

    def add_graph(self, graph: Graph) -> Graph:
        with self._lock:
            self.graphs[graph.handle] = graph
        return graph

    def graph(self, handle: int, what: str = "graph") -> Graph:
        graph = self.graphs.get(handle)
        if graph is None:
            raise invalid(f"{what} {handle:#x} is not a graph (destroyed, or not a cudaGraph_t)")
        return graph

    def node(self, handle: int, what: str = "node") -> Node:
        node = _nodes.get(handle)
        if node is not None and not node.removed and not node.graph.destroyed:
            return node
        raise invalid(f"{what} {handle:#x} is not a graph node (destroyed, or not a cudaGraphNode_t)")

    def destroy_graph(self, handle: int) -> None:
        with self._lock:
            graph = self.graphs.pop(handle, None)
        if graph is None:
            raise invalid(f"cudaGraphDestroy({handle:#x}): not a graph (destroyed already?)")
        graph.release()

    def add_exec(self, graph_exec: GraphExec) -> GraphExec:
        with self._lock:
            self.execs[graph_exec.handle] = graph_exec
        return graph_exec

    def exec(self, handle: int) -> GraphExec:
        graph_exec = self.execs.get(handle)
        if graph_exec is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                            f"{handle:#x} is not an executable graph (destroyed, or not a cudaGraphExec_t)")
        return graph_exec

    def pop_exec(self, handle: int) -> GraphExec:
        with self._lock:
            graph_exec = self.execs.pop(handle, None)
        if graph_exec is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                            f"cudaGraphExecDestroy({handle:#x}): not an executable graph (destroyed already?)")
        return graph_exec

    def add_user_object(self, obj: UserObject) -> UserObject:
        with self._lock:
            self.user_objects[obj.handle] = obj
        return obj

    def user_object(self, handle: int) -> UserObject:
        obj = self.user_objects.get(handle)
        if obj is None:
            raise invalid(f"{handle:#x} is not a user object (its last reference went, or not a cudaUserObject_t)")
        return obj

    def forget_device(self, device) -> None:
        """cudaDeviceReset: the device's executable graphs are gone from its
        server; they are sent again at their next launch."""
        for graph_exec in list(self.execs.values()):
            if graph_exec.device is device:
                graph_exec.forget_in_c()
                graph_exec.on_server = False

    def clear(self) -> None:
        with self._lock:
            self.graphs.clear()
            self.execs.clear()
            self.user_objects.clear()
            self.memory.clear()
