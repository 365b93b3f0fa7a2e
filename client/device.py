"""One remote GPU, as the application sees it: GPU<ordinal>.

Turns runtime operations into protocol messages on the device's link
(client/transport/link.py) and replies back into CUDA statuses.  Error messages name the call, the device
and the server.  A sticky error (an illegal address in a kernel, say) is
remembered: from then on every call on this device fails with it, as on a
real GPU whose context is lost, until cudaDeviceReset.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time

from rcuda import launch_rules, protocol
from rcuda.errors import CudaError, cudaError, is_sticky

from .transport.fast_path import SYNC_SCOPES

log = logging.getLogger(__name__)
trace = logging.getLogger("rcuda.trace")  # RCUDA_LOG=debug: every forwarded message

#: Properties that are rcuda's, whatever the GPU can do locally.  Mapped
#: host memory and managed memory are rcuda's own (client/memory/mapped.py,
#: client/memory/managed.py): a registered range's device pointer differs
#: from its host pointer, and the host must not touch managed memory while
#: kernels run (no concurrent managed access).  Pageable memory access and
#: host atomics need the GPU on this host's bus.
NOT_REMOTELY = {
    "canMapHostMemory": 1, "managedMemory": 1, "concurrentManagedAccess": 0, "pageableMemoryAccess": 0,
    "pageableMemoryAccessUsesHostPageTables": 0, "directManagedMemAccessFromHost": 0,
    "hostNativeAtomicSupported": 0, "canUseHostPointerForRegisteredMem": 0,
    "hostRegisterSupported": 1,  # cudaHostRegister works: the memory just stays on this host
    "memoryPoolsSupported": 1,  # pools are rcuda's own (client/memory/pools.py)
}
NOT_REMOTELY_ATTRIBUTES = {
    "cudaDevAttrCanMapHostMemory": 1, "cudaDevAttrManagedMemory": 1, "cudaDevAttrConcurrentManagedAccess": 0,
    "cudaDevAttrPageableMemoryAccess": 0, "cudaDevAttrPageableMemoryAccessUsesHostPageTables": 0,
    "cudaDevAttrDirectManagedMemAccessFromHost": 0, "cudaDevAttrHostNativeAtomicSupported": 0,
    "cudaDevAttrCanUseHostPointerForRegisteredMem": 0,
    "cudaDevAttrHostRegisterSupported": 1,
    "cudaDevAttrMemoryPoolsSupported": 1,
}
#: cudaMemHandleTypePosixFileDescriptor: the one kind of handle rcuda's pools
#: are shared with, on a backend whose sessions share memory (it says so).
POOL_HANDLE_TYPES = 0x1

#: Ops sent with a stream that are not work in it: a capture lets them pass (client/capture.py).
NOT_STREAM_WORK = frozenset({"stream_create", "stream_destroy", "stream_attr"})


def _check_length(frames, size: int, label: str) -> None:
    if sum(len(f.buffer) for f in frames) != size:
        raise CudaError(cudaError.cudaErrorUnknown, f"dtoh on {label}: short reply")


class RemoteDevice:
    def __init__(self, ordinal: int, session, local_index: int, link, properties: dict,
                 attributes: dict | None = None, fast=None, new_id=None):
        from .transport.fast_path import NullFastPath
        self.ordinal = ordinal
        self.fast = fast or NullFastPath()
        self.new_id = new_id or itertools.count(1).__next__  # the runtime's: ids unique in the process
        self.session = session
        self.local_index = local_index  # the GPU's index on its server
        self.link = link
        link.on_failure(self.lost)
        self.describe(properties, attributes or {})
        self.output_sink = None  # callable(str): where device printf output goes
        self.stats = None        # client/stats.py Stats, with RCUDA_STATS=1
        self.flags = 0           # cudaSetDeviceFlags
        self.generation = 0      # counts cudaDeviceResets: objects of an older one are gone
        self.mirrored = 0        # mapped host memory ranges on this device (client/memory/mapped.py)
        self.mirror_lock = threading.Lock()  # their downloads through Python (a ZeroMQ link), one at a time
        self._lock = threading.Lock()
        self._clean_lock = threading.Lock()  # a leaf: C's word on synchronous calls, kept consistent
        self._pools_pending = False  # a synchronisation has memory pool work (client/memory/pools.py)
        self._fast_lock = threading.Lock()  # a kernel's attributes and its keys in C, consistent
        # Stream capture and graph nodes (client/capture.py): stream id -> what
        # takes the requests sent with it instead of the link, and the rules
        # a device with a capture enforces on its other calls.
        self.sinks: dict = {}
        self.capture_rules = None
        self._forget_state()

    def _forget_state(self) -> None:
        """What this process created on the GPU (reset by cudaDeviceReset)."""
        self.generation += 1
        self.sticky: CudaError | None = None
        self.deferred = None  # an asynchronous failure not yet reported
        self._function_ids: dict = {}   # Kernel -> id on this device
        self._function_attrs: dict = {}  # Kernel -> cudaFuncAttributes fields
        self._fast_keys: dict = {}       # Kernel -> the keys C records its launches under (host stubs, handles)
        self._sent_modules: set[str] = set()
        self._symbols: dict = {}        # (module key, name) -> (address, size)

    @property
    def deferred(self) -> CudaError | None:
        return self._deferred

    @deferred.setter
    def deferred(self, error: CudaError | None) -> None:
        self._deferred = error
        self.tell_clean()

    def pools_pending(self, pending: bool) -> None:
        """Whether a synchronisation on this device has memory pool work to
        do (frees to see complete, memory to release): then Python makes it."""
        self._pools_pending = pending
        self.tell_clean()

    def tell_clean(self) -> None:
        """C makes the device's synchronous calls only while there is no
        error to report with them and no memory pool waits for them.  Read
        under the lock: the last word C gets is about the newest state."""
        with self._clean_lock:
            self.fast.device_clean(self, self._deferred is None and not self._pools_pending)

    def describe(self, properties: dict, attributes: dict) -> None:
        """Take the server's description of the GPU, minus what rcuda cannot
        offer remotely."""
        self.properties = dict(properties, **NOT_REMOTELY)
        self.attributes = dict(attributes, **NOT_REMOTELY_ATTRIBUTES)
        handle_types = properties.get("memoryPoolSupportedHandleTypes", 0) & POOL_HANDLE_TYPES
        self.properties["memoryPoolSupportedHandleTypes"] = handle_types
        self.attributes["cudaDevAttrMemoryPoolSupportedHandleTypes"] = handle_types

    @property
    def label(self) -> str:
        return f"GPU{self.ordinal} ({self.session.address} GPU{self.local_index})"

    def __str__(self) -> str:
        return self.label

    # ---------------------------------------------------------- messaging

    def _check_usable(self, op: str) -> None:
        if self.sticky is not None:
            raise CudaError(self.sticky.status, f"{op} on {self.label}: earlier error is sticky: "
                                                f"{self.sticky.message}")

    def request(self, op: str, frames=(), into=None, **fields) -> tuple[dict, list]:
        """A synchronous call: waits for the reply, raises CudaError on failure
        (its own, or an earlier asynchronous one reported with it).  A reply
        payload of exactly len(into) bytes lands in `into`."""
        self._check_usable(op)
        if self.sinks or self.capture_rules is not None:
            self._before_request(op, fields)
        fields["op"] = op
        started = time.perf_counter()
        # A synchronisation: mapped memory may then need the device's writes.
        mirrors = self.fast.mirror_before_sync(self, op, fields) if self.mirrored and op in SYNC_SCOPES else None
        reply, payload = self.link.call(fields, frames, into)
        landed = [memoryview(into)] if into is not None and not payload and not reply.get("err") else payload
        self._answered(op, fields, frames, landed, started, reply)
        if mirrors is not None and reply.get("ready", True):  # (a query: once it says the work is done)
            self.refresh_mirrors(mirrors)
        return reply, payload

    def _before_request(self, op: str, fields: dict) -> None:
        """A call that waits for its reply cannot go into a capture or a
        graph node; with a capture on the device, CUDA forbids some more."""
        sink = self.sinks.get(fields.get("stream"))
        if sink is not None:
            sink.refuse(op)
        if self.capture_rules is not None:
            self.capture_rules(self, op, fields)

    def mirror_token(self, op: str, **fields):
        """Before synchronising request `op` (a host function's marker, say)
        is sent: what refresh_mirrors needs once its reply came (None: no
        mapped memory on this device)."""
        return self.fast.mirror_before_sync(self, op, fields) if self.mirrored else None

    def refresh_mirrors(self, token) -> None:
        """After a synchronisation: the device's writes to mapped memory, if
        it may have made some, into the host copies (client/memory/mapped.py)."""
        if token is not None:
            self.fast.mirror_refresh(self, token)

    def answered(self, op: str, reply: dict) -> None:
        """A reply to a synchronous call C made (native/sync_fast_path.c) that
        C leaves to Python: raise its error, or an earlier asynchronous one;
        show its device output."""
        self._check_reply(op, reply)
        self.raise_deferred(op)

    def _answered(self, op: str, fields: dict, sent, received, started: float, reply: dict) -> None:
        """After a synchronous call's reply: trace and count it, then raise
        its error, or an earlier asynchronous one."""
        self._account(op, fields, sent, received, time.perf_counter() - started)
        self._check_reply(op, reply)
        self.raise_deferred(op)

    def post(self, op: str, frames=(), borrowed: bool = False, **fields) -> None:
        """An asynchronous call: errors surface at a later synchronous one.
        `borrowed` frames (pinned memory) are read when the message goes out."""
        self._check_usable(op)
        fields["op"] = op
        if op in protocol.MAY_BE_ASYNC:
            fields["async"] = True
        if self.sinks or self.capture_rules is not None:
            stream = fields.get("stream")
            sink = self.sinks.get(stream)
            if sink is not None and op not in NOT_STREAM_WORK:  # recorded into a graph, not sent
                sink(fields, [memoryview(bytes(f)) for f in frames] if borrowed else list(frames))
                return
            if stream == 0 and self.capture_rules is not None:
                self.capture_rules(self, op, fields)
        self.link.post(fields, frames, borrowed)
        self._account(op, fields, frames, (), None)

    def post_with_callback(self, op: str, on_success, frames=(), finally_=None, into=None, **fields) -> None:
        """Asynchronous, but answered: `on_success(reply, payload)` runs in the
        link's thread when the reply arrives (a payload of len(into) bytes
        lands in `into` first); a failure is kept for the next synchronous
        call.  `finally_()` runs after either."""
        self._check_usable(op)
        if self.sinks or self.capture_rules is not None:
            self._before_request(op, fields)
        fields["op"] = op

        def receive(reply, payload, error):
            try:
                if error is not None:
                    raise error
                self._account(op, fields, (), payload, None)
                self._check_reply(op, reply)
                on_success(reply, payload)
            except CudaError as exc:
                self.deferred = self.deferred or exc
            except Exception as exc:  # noqa: BLE001 - a transport error, kept for the next call
                self.deferred = self.deferred or CudaError(getattr(exc, "status", cudaError.cudaErrorUnknown),
                                                           f"{op} on {self.label}: {exc}")
            finally:
                if finally_ is not None:
                    finally_()

        self.link.post_awaited(fields, frames, receive, into)

    def _account(self, op: str, fields: dict, sent, received, seconds: float | None) -> None:
        """Trace the message (RCUDA_LOG=debug) and count its bytes (RCUDA_STATS)."""
        if self.stats is None and not trace.isEnabledFor(logging.DEBUG):
            return
        out = sum(len(getattr(f, "buffer", f)) for f in sent)
        back = sum(len(getattr(f, "buffer", f)) for f in received)
        if self.stats is not None:
            self.stats.moved(self.label, op, out or back or fields.get("size", 0))
        if trace.isEnabledFor(logging.DEBUG):
            when = "async" if seconds is None else f"{seconds * 1e6:.0f} us"
            trace.debug("%s %s: %d B out, %d B back, %s", op, self.label, out, back, when)

    def _check_reply(self, op: str, reply: dict) -> None:
        text = reply.get("out")
        if text and self.output_sink:
            self.output_sink(text)
        status = reply.get("err", 0)
        if status:
            error = CudaError(status, f"{op} on {self.label}: {reply.get('msg') or ''}".rstrip(": "))
            if is_sticky(status):
                self.sticky = error
                self.fast.set_usable(self, False)  # launches must now fail, in Python
            raise error

    def raise_deferred(self, op: str) -> None:
        error, self.deferred = self.deferred, None
        if error is not None:
            raise error

    # ---------------------------------------------------------- memory

    def malloc(self, size: int) -> int:
        reply, _ = self.request("malloc", size=size)
        return reply["ptr"]

    def free(self, ptr: int) -> None:
        self.request("free", ptr=ptr)

    def copy_to_device(self, dst: int, data: memoryview, stream: int = 0) -> None:
        """A synchronous upload: the bytes go out from where they are."""
        self.request("htod", [data], dst=dst, size=len(data), stream=stream)

    def copy_from_device(self, src: int, size: int, stream: int = 0, into=None) -> list:
        """A synchronous download: into `into` (writable, `size` bytes) when
        given, else the bytes as payload frames (each has .buffer)."""
        reply, frames = self.request("dtoh", into=into, src=src, size=size, stream=stream)
        if into is None or frames:
            _check_length(frames, size, self.label)
            if into is not None:  # not landed: not the bytes asked for
                raise CudaError(cudaError.cudaErrorUnknown, f"dtoh on {self.label}: short reply")
        return frames

    def copy_on_device(self, dst: int, src: int, size: int, stream: int = 0) -> None:
        self.request("dtod", dst=dst, src=src, size=size, stream=stream)

    def memset(self, ptr: int, value: int, size: int, stream: int = 0, elem: int = 1) -> None:
        self.request("memset", ptr=ptr, value=value, size=size, stream=stream, elem=elem)

    def synchronize(self) -> None:
        self.request("sync")

    def mem_info(self) -> tuple[int, int]:
        reply, _ = self.request("mem_info")
        return reply["free"], reply["total"]

    # ---------------------------------------------------------- code

    def ensure_module(self, module) -> str:
        """Send a module's image the first time this device needs it; the
        server's JIT info log ("" when it was sent before)."""
        if module.key in self._sent_modules:
            return ""
        with self._lock:
            if module.key not in self._sent_modules:
                reply, _ = self.request("module", [module.image], module=module.key)
                self._sent_modules.add(module.key)
                return reply.get("info", "")
        return ""

    def link_images(self, inputs: list[tuple[str, bytes]]) -> tuple[bytes, str]:
        """cuLinkComplete on this device's server: (the linked image, the info log)."""
        reply, frames = self.request("link", [data for _, data in inputs], names=[name for name, _ in inputs],
                                     sizes=[len(data) for _, data in inputs])
        return b"".join(bytes(f.buffer) for f in frames), reply.get("info", "")

    def function_id(self, kernel) -> int:
        """The id under which `kernel` is known on this device.  The first use
        registers it: a synchronous round trip, so a kernel the server cannot
        run fails at its launch, as on a GPU."""
        fn = self._function_ids.get(kernel)
        if fn is not None:
            return fn
        self.ensure_module(kernel.module)
        with self._lock:
            fn = self._function_ids.get(kernel)
            if fn is None:
                params = kernel.params
                fn = self.new_id()
                reply, _ = self.request("function", module=kernel.module.key, fn=fn, name=kernel.name,
                                        offsets=list(params.offsets), sizes=list(params.sizes))
                self._function_attrs[kernel] = dict(reply.get("attrs") or {})
                self._function_ids[kernel] = fn
        return fn

    def has_function(self, kernel) -> bool:
        """Whether `kernel` is registered here already (cuFuncIsLoaded)."""
        return kernel in self._function_ids

    def function_attributes(self, kernel) -> dict:
        """cudaFuncAttributes fields, as the server reported them when the
        kernel was registered (or after cudaFuncSetAttribute)."""
        self.function_id(kernel)
        return self._function_attrs[kernel]

    def set_function_attribute(self, kernel, attribute: str, value: int) -> None:
        fn = self.function_id(kernel)
        self.request("func_set_attr", fn=fn, attr=attribute, value=value)
        reply, _ = self.request("func_attrs", fn=fn)  # the limits launches are checked against changed
        with self._fast_lock:
            self._function_attrs[kernel] = dict(reply["attrs"])
            if launch_rules.is_cluster_kernel(self._function_attrs[kernel]):
                # A required cluster shape now: its <<<>>> launches are
                # cluster launches, which C does not record.
                for key in self._fast_keys.pop(kernel, ()):
                    self.fast.kernel_gone(key, [self])

    def fast_path_ready(self, key: int, kernel, fn: int) -> None:
        """Let C record the next plain launches of `kernel` under `key` (its
        host stub or handle), unless every launch of it is a cluster launch
        (those go through Python, as cooperative ones)."""
        self.function_id(kernel)
        with self._fast_lock:
            attrs = self._function_attrs[kernel]
            if launch_rules.is_cluster_kernel(attrs):
                return
            self._fast_keys.setdefault(kernel, set()).add(key)
            self.fast.kernel_ready(key, kernel, self, fn, attrs)

    def symbol(self, module, name: str) -> tuple[int, int]:
        """(address, size) of a __device__ variable on this device."""
        found = self._symbols.get((module.key, name))
        if found is None:
            self.ensure_module(module)
            reply, _ = self.request("symbol", module=module.key, name=name)
            found = self._symbols[(module.key, name)] = (reply["ptr"], reply["size"])
        return found

    def launch(self, fn: int, grid, block, shared_mem: int, stream: int, params: bytes,
               cooperative: bool = False, cluster=None) -> None:
        """`cluster`: the cluster shape of a cluster launch (the optional
        field says it), None for any other."""
        extra = {} if cluster is None else {"cluster": list(cluster)}
        self.post("launch", [params], fn=fn, grid=grid, block=block, shmem=shared_mem, stream=stream,
                  cooperative=int(cooperative), **extra)

    def check_kernel_limits(self, kernel, block, shared_mem: int) -> None:
        """The kernel's own limits (launch bounds, registers, dynamic shared
        memory: rcuda/launch_rules.py), checked here so the error comes at the
        launch, as on a GPU."""
        attrs = self._function_attrs.get(kernel)
        if attrs:
            launch_rules.check_kernel(launch_rules.kernel_limits(attrs), kernel.name, block, shared_mem,
                                      where=f"launch on {self.label}: ")

    def check_cooperative_grid(self, kernel, grid, block, shared_mem: int) -> None:
        """A cooperative launch's blocks must all be resident at once
        (rcuda/launch_rules.py), as CUDA checks before launching one."""
        launch_rules.check_cooperative(self.properties, self.function_attributes(kernel), kernel.name, grid, block,
                                       shared_mem, where=f"cooperative launch on {self.label}: ")

    def launch_cluster(self, kernel, grid, block, shared_mem: int, cluster) -> tuple | None:
        """The cluster shape of a launch asked for `cluster` (None: none
        given; the kernel's own __cluster_dims__ then), None when it is not
        a cluster launch, checked as a GPU checks it (rcuda/launch_rules.py)."""
        return launch_rules.check_cluster_launch(self.properties, self.function_attributes(kernel), kernel.name,
                                                 grid, block, shared_mem, cluster,
                                                 where=f"cluster launch on {self.label}: ")

    def check_launch_configuration(self, grid, block, shared_mem: int) -> None:
        """What a GPU rejects at launch time (rcuda/launch_rules.py), checked
        here against the cached properties so the error is synchronous as on
        a GPU."""
        launch_rules.check_device(launch_rules.device_limits(self.properties), grid, block, shared_mem,
                                  where=f"launch on {self.label}: ")

    # ---------------------------------------------------------- lifecycle

    def lost(self, error) -> None:
        """The server or the link went away: every call on this device fails
        from now on."""
        self.fast.set_usable(self, False)
        self.link.fail(error)

    def reset(self) -> None:
        """cudaDeviceReset: the server frees everything; so do we."""
        reply, _ = self.link.call({"op": "reset"})  # not `request`: a sticky error must not stop it
        self._forget_state()
        if reply.get("err"):
            raise CudaError(reply["err"], f"cudaDeviceReset on {self.label}: {reply.get('msg', '')}")

    def close(self) -> None:
        """End this device's part of the session (the server frees its memory).
        The reply also proves every earlier asynchronous message arrived."""
        if self.link.failed:
            self.link.close()
            return
        try:
            self.link.call({"op": "close"})
        finally:
            self.link.close()
