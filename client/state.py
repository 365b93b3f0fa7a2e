"""The client's runtime state, in one object.

`Runtime` holds what the CUDA runtime keeps per process (the devices, the
registered kernels, the allocation map) and per host thread (the current
device, the last error).  Like CUDA, it initialises lazily, on the first
call that needs a device: it connects to every server in RCUDA_SERVERS in
parallel, numbers their GPUs GPU0, GPU1, ... in server order, then applies
CUDA_VISIBLE_DEVICES.  A failed initialisation is remembered and returned by
every later call, as CUDA does.
"""
from __future__ import annotations

import itertools
import logging
import threading

import zmq

from rcuda import protocol
from rcuda.auth import ClientKeys
from rcuda.config import ClientConfig, ConfigError, select_visible
from rcuda.errors import CudaError, RcudaError, cudaError, is_sticky
from rcuda.protocol import VA_WINDOW_SIZE, VMM_WINDOW_SIZE

from .memory.allocations import AllocationMap
from .memory.arrays import ArrayTable, SamplerTable
from .callbacks import HostCallbacks
from .capture import Captures
from .graphs import GraphTable
from .driver.context_stacks import Contexts
from .libraries.objects import objects as library_objects
from .device import RemoteDevice
from .transport.lane import LaneLink, connect_lane
from .transport.fast_path import NullFastPath
from .memory.host import HostMemory, PendingDownloads
from .memory.managed import ManagedMemory
from .memory.mapped import MappedMemory
from .memory.pinned import PinnedMemory
from .memory.pools import MemoryPools
from .modules import KernelRegistry
from .transport.peer import PeerCopies
from .transport.session import ServerSession
from .transport.zmq_socket import SocketLink
from .streams import StreamTable
from .memory import address_space
from .memory.virtual import VirtualMemory

log = logging.getLogger(__name__)

#: Where the program's VMM window is asked for first: above the slots the
#: first 80 GPUs' windows take (client/memory/address_space.py).
VMM_HINT = 0x6000_0000_0000


class Runtime:
    def __init__(self, config: ClientConfig | None = None):
        self._config = config
        self._init_lock = threading.Lock()
        self._devices: list[RemoteDevice] | None = None
        self._init_error: RcudaError | None = None
        self._threads = threading.local()
        self._sessions: list[ServerSession] = []
        self._context: zmq.Context | None = None
        #: Ids of streams, events and functions: chosen here, unique in the
        #: process, never reused (the server knows objects by them).
        self.new_id = itertools.count(1).__next__
        self.c_strings: dict = {}     # C strings handed to the program (static, as CUDA's are)
        self.fatbin_handles: list = []  # what __cudaRegisterFatBinary returned: kept until exit
        self.unsupported_reported: set[str] = set()  # unsupported functions already logged once
        self.kernels = KernelRegistry()
        self.allocations = AllocationMap()
        self.pools = MemoryPools(self.allocations)  # stream-ordered allocation (cudaMallocAsync)
        self.host_memory = HostMemory()
        self.mapped = MappedMemory()  # mapped (zero-copy) host memory: a host and a device copy each
        self.managed = ManagedMemory(self.mapped)  # cudaMallocManaged's: mirrors too
        self.pinned = PinnedMemory(self.mapped)    # cudaHostAlloc's: mirrors once a kernel uses them
        self.pending_downloads = PendingDownloads()  # asynchronous copies into pinned memory in flight
        self.virtual_memory = VirtualMemory()  # the driver's reservations and mappings (cuMemMap)
        self.arrays = ArrayTable()        # CUDA arrays (cudaMallocArray, cuArrayCreate, ...)
        self.samplers = SamplerTable()    # texture and surface objects
        self.streams = StreamTable(new_id=self.new_id)
        self.contexts = self._new_contexts()  # CUcontexts; the current one is the current device's
        self.callbacks = HostCallbacks()
        self.graphs = GraphTable()      # CUDA graphs, their nodes, executable graphs (client/graphs.py)
        self.captures = Captures()      # stream capture (client/capture.py)
        self.limits: dict[str, int] = {}  # cudaDeviceSetLimit, per process as in CUDA
        self.fast = NullFastPath()  # the C launch path, when running inside the interposer
        self.stats = None           # client/stats.py Stats, with RCUDA_STATS=1
        self.peer_copies = PeerCopies()  # copies between GPUs, peer access
        self.output_sink = None  # set by the entry points: writes device printf output

    # ---------------------------------------------------------- devices

    @property
    def devices(self) -> list[RemoteDevice]:
        if self._devices is None:
            with self._init_lock:
                if self._devices is None and self._init_error is None:
                    try:
                        self._devices = self._connect()
                    except RcudaError as exc:
                        self._init_error = exc
                    except ConfigError as exc:
                        log.error("configuration: %s", exc)  # once: later calls return the status quietly
                        self._init_error = CudaError(cudaError.cudaErrorInvalidValue, str(exc))
        if self._init_error is not None:
            raise self._init_error
        return self._devices

    def device(self, ordinal: int | None = None) -> RemoteDevice:
        """The given device, or this thread's current one (whose primary
        context becomes the thread's current context if it has none, as
        CUDA's runtime binds one at a thread's first call that needs it)."""
        devices = self.devices
        current = ordinal is None
        if current:
            ordinal = self.current_ordinal
        if not 0 <= ordinal < len(devices):
            raise CudaError(cudaError.cudaErrorInvalidDevice,
                            f"device {ordinal} does not exist ({len(devices)} visible)")
        if current:
            self.contexts.bind_primary_if_none(ordinal)
        return devices[ordinal]

    def use_fast_path(self, fast) -> None:
        """Inside the interposer: launches are recorded in C (client/transport/fast_path.py)."""
        self.fast = fast
        self.streams.fast = fast
        self.pools.fast = fast
        fast.events_welcome(True)
        self.allocations.watch(fast)  # C makes cudaMemcpy where it knows the pointers
        self.host_memory.watch(fast)  # and records uploads from pageable memory only

    def opened_devices(self) -> list[RemoteDevice]:
        """The devices, if the runtime has been initialised; else none."""
        return list(self._devices or [])

    @property
    def current_ordinal(self) -> int:
        return self.fast.current_device(self._threads)

    def set_device(self, ordinal: int) -> None:
        """cudaSetDevice: the device's primary context becomes the thread's
        current context (client/driver/context_stacks.py), the device the current one."""
        self.device(ordinal)  # validates
        self.contexts.set_current(self.contexts.primary(ordinal))

    def _new_contexts(self) -> Contexts:
        return Contexts(bind_device=self._bind_context_device)

    def _bind_context_device(self, ordinal: int | None) -> None:
        """The thread's current context is on device `ordinal` now (None: it
        has none; the runtime keeps its current device)."""
        if ordinal is not None:
            self.fast.set_current_device(self._threads, ordinal)
        self.fast.set_driver_context(ordinal is not None)

    def _connect(self) -> list[RemoteDevice]:
        config = self._config or ClientConfig.load()
        if not config.servers:
            raise CudaError(cudaError.cudaErrorNoDevice,
                            "no rcuda servers configured: set RCUDA_SERVERS=HOST:PORT[,HOST:PORT...] "
                            "or start the program with `rcuda run --servers HOST:PORT -- PROGRAM`")
        self._context = zmq.Context.instance() if self._context is None else self._context
        self.fast.mirror_on_touch(config.managed_on_touch)
        sessions = self._connect_all(config)
        devices: list[RemoteDevice] = []
        for session in sessions:
            for local_index, props in enumerate(session.devices):
                devices.append((session, local_index, props))
        chosen = select_visible(devices, config.visible_devices,
                                uuid_of=lambda d: "GPU-" + d[2].get("uuid_str", ""))
        if not chosen:  # as CUDA: no visible device is an error, not a count of 0
            for session in sessions:
                session.close()
            raise CudaError(cudaError.cudaErrorNoDevice,
                            f"CUDA_VISIBLE_DEVICES={config.visible_devices!r} selects none of the {len(devices)} "
                            f"GPU(s) of {', '.join(str(s.address) for s in sessions)}")
        result = []
        for ordinal, (session, local_index, props) in enumerate(chosen):
            label = f"GPU{ordinal} ({session.address} GPU{local_index})"
            link = self._link(config, session, local_index, ordinal, label)
            device = RemoteDevice(ordinal, session, local_index, link, props, fast=self.fast, new_id=self.new_id)
            device.output_sink = self.output_sink
            device.stats = link.stats = self.stats
            session.on_failure(device.lost)
            session.on_heard(link.heard)
            result.append(device)
        self._open_all(result)
        for device in result:
            self.fast.device_opened(device)
        log.info("%d device(s): %s", len(result), ", ".join(d.label for d in result))
        return result

    def _link(self, config: ClientConfig, session: ServerSession, local_index: int, ordinal: int, label: str):
        """The device's link (client/transport/link.py): its lane, where the server
        offers one and it connects; else its ZeroMQ socket."""
        native = self.fast.native()
        lane_address = session.lane_address(local_index) if config.link == "lane" and native is not None else None
        if lane_address is not None and session.lane_secret is not None and not native[1].rcuda_seal_available():
            log.warning("%s: OpenSSL's libcrypto (libcrypto.so.3) did not load: the device takes its ZeroMQ "
                        "socket, not the server's sealed lane", label)
            lane_address = None
        if lane_address is not None:
            connected = connect_lane(lane_address, {"token": session.token, "dev": local_index}, label,
                                     config.timeout, session.lane_secret)
            if connected is not None:
                sock, seal = connected
                link = LaneLink(native, sock, label, config.timeout, batch_device=self.fast.batch_device(ordinal),
                                spin_us=config.spin_us, seal=seal)
                link.transport = protocol.transport("lane", seal is not None)
                return link
        link = SocketLink(self._context, session.endpoint(local_index), label, config.timeout,
                          liveness=session.liveness, batch_source=self.fast.batch_source(ordinal),
                          mirror_source=self.fast.mirror_source(ordinal), socket_options=session.socket_options)
        link.transport = protocol.transport("socket", session.curve is not None)
        return link

    def _connect_all(self, config: ClientConfig) -> list[ServerSession]:
        """Hello to every server at once; any failure fails initialisation,
        because GPU numbering would otherwise silently shift."""
        results: list = [None] * len(config.servers)
        keys = ClientKeys.from_config(config)  # CURVE keys, with --auth servers (rcuda/auth.py)
        curves = [keys.for_server(address) for address in config.servers]

        def connect(i, address):
            try:
                results[i] = ServerSession.connect(self._context, address, config.timeout, curves[i])
            except RcudaError as exc:
                results[i] = exc

        threads = [threading.Thread(target=connect, args=(i, a), daemon=True)
                   for i, a in enumerate(config.servers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self._sessions = [r for r in results if isinstance(r, ServerSession)]
        failures = [r for r in results if not isinstance(r, ServerSession)]
        if failures:
            for session in self._sessions:
                session.close()
            raise failures[0] if len(failures) == 1 else type(failures[0])(
                "; ".join(str(f) for f in failures), failures[0].status)
        return self._sessions

    def _open_all(self, devices: list[RemoteDevice]) -> None:
        """Bind each device's link to its GPU, all devices in parallel; then
        settle where their address windows lie (client/memory/address_space.py)."""
        replies: dict = {}
        vmm_hint = address_space.claim_slot(VMM_WINDOW_SIZE, preferred=VMM_HINT)
        hints = {device: address_space.claim_slot(VA_WINDOW_SIZE) for device in devices}

        def open_device(device):
            header = {"op": "open", "dev": device.local_index, "token": device.session.token,
                      "va_base": hints[device], "vmm_base": vmm_hint}
            try:
                replies[device] = device.link.call(header)[0]
            except RcudaError as exc:
                replies[device] = exc

        threads = [threading.Thread(target=open_device, args=(d,), daemon=True) for d in devices]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for device in devices:
            reply = replies[device]
            if isinstance(reply, RcudaError) or reply.get("err"):
                for claimed in [vmm_hint, *hints.values()]:
                    address_space.unclaim(claimed)
            if isinstance(reply, RcudaError):
                raise reply
            if reply.get("err"):
                raise CudaError(reply["err"], f"open {device.label}: {reply.get('msg', '')}")
            device.describe(reply.get("props") or device.properties, reply.get("attributes") or {})
        try:
            for device in devices:
                self._settle(device, "device", VA_WINDOW_SIZE, hints.pop(device), replies[device]["va_base"])
            self._settle_vmm(devices, replies, vmm_hint)
        except OSError as exc:
            raise CudaError(cudaError.cudaErrorMemoryAllocation, str(exc)) from None

    @staticmethod
    def _settle(device: RemoteDevice, window: str, size: int, hint: int, granted) -> int:
        """Claim the range the server reserved for a window, or have it moved."""
        if not isinstance(granted, int):
            raise RcudaError(f"open {device.label}: the server reserved no address window (an rcuda server "
                             f"older than this client?)")

        def move(new_hint):
            return device.link.call({"op": "move_window", "window": window, "hint": new_hint})[0]["base"]
        return address_space.settle(size, hint, granted, move, f"{device.label}'s {window} address window")

    def _settle_vmm(self, devices: list[RemoteDevice], replies: dict, hint: int) -> None:
        """The program's one VMM window: where its first server put it; each
        other server is asked to put its own there too.  A server whose
        driver will not cannot map the program's ranges (cuMemMap says so)."""
        first_of_session = {}
        for device in devices:
            first_of_session.setdefault(device.session, device)
        window = None
        for session, device in first_of_session.items():
            granted = replies[device].get("vmm_base")
            if window is None:
                window = self._settle(device, "vmm", VMM_WINDOW_SIZE, hint, granted)
            elif granted != window:
                granted = device.link.call({"op": "move_window", "window": "vmm", "hint": window})[0]["base"]
                if granted != window:
                    log.warning("%s: its driver reserved the VMM window at %#x, not at %#x as the program's other "
                                "servers did: cuMemMap on its GPUs will fail", session.address, granted, window)
            session.vmm_base = granted
        self.virtual_memory.window = (window, VMM_WINDOW_SIZE)

    # ---------------------------------------------------------- errors

    def record_error(self, status: int) -> None:
        """A call failed: remember it as this thread's last error."""
        if status:
            self._threads.last_error = status
            self.fast.errors_changed()

    def peek_last_error(self) -> int:
        status = getattr(self._threads, "last_error", 0)
        sticky = self._sticky_status()
        return sticky or status

    def take_last_error(self) -> int:
        """cudaGetLastError: return and reset the last error; sticky ones stay."""
        status = getattr(self._threads, "last_error", 0)
        self._threads.last_error = 0
        sticky = self._sticky_status()
        return sticky or status

    def _sticky_status(self) -> int:
        if self._devices is None:
            return 0
        ordinal = self.current_ordinal
        if 0 <= ordinal < len(self._devices) and self._devices[ordinal].sticky is not None:
            return int(self._devices[ordinal].sticky.status)
        return 0

    # ---------------------------------------------------------- lifecycle

    def shutdown(self) -> None:
        """At exit: close every device (the close reply proves all queued
        asynchronous work reached the server), then the sessions."""
        devices = self._devices or []
        self.mapped.forget_all(self.fast)  # plain memory again: nothing more goes to the devices
        self.managed.forget_all()
        for i, device in enumerate(devices):
            try:
                device.close()
            except RcudaError as exc:
                if not is_sticky(exc.status):
                    log.warning("at exit: %s", exc)
            if self.stats is not None:
                self.stats.fast_launches(device.label, device.link.records_shipped())
                self.stats.link(device.label, device.link.transport)
            records = self.fast.records_in_c(device.ordinal)
            if records is not None:
                log.info("%s: %d synchronous call(s) made in C on its link, %d asynchronous operation(s) "
                         "(memsets, copies, event records and waits, graph launches) recorded in C", device.label,
                         device.link.calls_in_c(), records)
            # A worker ends when its last device is closed: stop pinging it
            # now, or a slow close elsewhere would have it reported as lost.
            if all(other.session is not device.session for other in devices[i + 1:]):
                device.session.stop_heartbeat()
        for session in self._sessions:
            session.stop_heartbeat()
        for session in self._sessions:
            session.close()

    def reset_device(self, device: RemoteDevice) -> None:
        """cudaDeviceReset: everything the process had on `device` is gone."""
        try:
            self.pinned.forget_device(self, device)   # plain memory again, with the host's bytes
            self.mapped.forget_device(self.fast, device)  # the device copies go with the reset
            self.managed.forget_device(device)
            device.reset()
        finally:
            for allocation in self.allocations.of_device(device):
                self.allocations.remove(allocation.base)
            self.captures.forget_device(device)
            self.graphs.forget_device(device)
            self.streams.forget_device(device)
            self.peer_copies.forget_device(device)
            self.pools.forget_device(device)
            self.virtual_memory.forget_device(device)
            self.arrays.forget_device(device)
            self.samplers.forget_device(device)
            self.contexts.forget_device(device.ordinal)
            library_objects.forget_device(device)
            self.fast.device_reset(device)

    def forget_after_fork(self) -> None:
        """In a forked child: the parent's connections are not ours.  Start
        over lazily with new ones (the parent's allocations, streams and
        events stay the parent's, as CUDA contexts are not inherited either)."""
        self._devices = None
        self._init_error = None
        self._sessions = []
        self._context = None
        self.allocations.clear()
        self.pools.clear()
        self.virtual_memory.clear()
        self.arrays.clear()
        self.samplers.clear()
        self.mapped.forget_after_fork()  # C made their pages plain memory
        self.pinned.forget_after_fork()
        self.managed.forget_all()
        self.streams.clear()
        self.captures.clear()
        self.graphs.clear()
        self.contexts = self._new_contexts()
        self.fast.set_driver_context(False)  # the forking thread's, in C
        self.callbacks = HostCallbacks()
        self.pending_downloads = PendingDownloads()  # the parent's land in the parent
        self.peer_copies = PeerCopies()
        library_objects.forget()
        self._threads = threading.local()
