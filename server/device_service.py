"""Serves one GPU to one client session, in a thread of its own.

The device's client talks to this thread alone, on one connection: its lane
(a TCP connection, rcuda/lane.py; servers without --auth) or its ZeroMQ
socket (with --auth, or when the client cannot reach the lane).  Whichever
opens the device is the session's; requests are served in the order they
arrive.  Every message is checked before anything is done with it; a bad one
gets an error reply and changes nothing.

Nothing here waits for the GPU.  A request that must wait for device work
(a stream, event or device synchronisation, a copy to the host, cudaFree,
a host function's marker) gets a `Completion` from the backend and is
answered when it is ready, while the thread goes on serving the session's
other requests: a client thread waiting on a long stream holds up no other
thread's calls.  Replies therefore come in any order; each echoes its
request's `seq`.  But never ahead of an earlier request's whose work is done
by then: the client acts on a reply as it arrives (a download into pinned
memory lands its bytes, a marker runs a host function, a finished query lets
the program read), so in one stream the replies keep the stream's order
(`_answer_what_is_ready`).

CUDA's error model is kept: asynchronous requests (launches, and copies or
stream/event operations sent with "async") get no reply, their failures are
reported by the next reply; a sticky error (illegal address, assert, launch
failure) makes every later op fail with it until cudaDeviceReset; device
output (printf) is collected and returned with the next reply.

Streams and events are named by ids the client chose; the service keeps the
session's set of each, so the backend only ever sees ids that exist.
"""
from __future__ import annotations

import contextlib
import hmac
import logging
import math
import os
import socket as pysocket
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np
import zmq

from rcuda import protocol, sealed, stream_memops, tensor_maps, wire
from rcuda.errors import CudaError, ProtocolError, cudaError, is_sticky
from rcuda.lane import Lane, LaneClosed, SpinPolicy, UnreadFrame, listen, set_timeouts
from rcuda.launch_rules import MAX_PARAM_BYTES
from rcuda.log import RateLimitedLog
from rcuda.server.backends.arrays import ArraySpec, Place, extent_from_wire
from rcuda.server.backends import cuda_batches
from rcuda.server.backends.base import Completion, ParamLayout
from rcuda.server import ipc
from rcuda.server.address_windows import SessionWindows
from rcuda.server.mirror_views import MirrorViews
from rcuda.server.library_calls import LibraryCalls
from rcuda.server.graphs import GraphOps
from rcuda.server.peer import PeerOps

log = logging.getLogger(__name__)
bad_requests = RateLimitedLog(log)
#: Plain ints for the checks made on every message (pyzmq's are enum members,
#: a microsecond a time to combine).
ZMQ_EVENTS, ZMQ_POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)

#: Longest wait for anything before the thread looks whether to stop (ms).
POLL_MS = 200
LEGACY_STREAM = 0
#: How long a lane message may take to arrive whole once it has begun, and
#: how long a lane connection may take to say whose it is (seconds).
LANE_READ_TIMEOUT = 5.0
#: A copy on the lane into a backend whose device memory is not in this
#: process (a GPU) is staged through host memory this many bytes at a time.
LANE_STAGING_PIECE = 4 << 20

#: Ops served even after a sticky error: ending or resetting the session, and
#: the halves of a copy between servers (so the other side is not left waiting).
STICKY_EXEMPT = frozenset({"open", "close", "reset", "peer_push", "peer_wait"})


@dataclass
class Usage:
    """What a session did on one GPU, for `rcuda smi` and the metrics."""

    calls: int = 0
    busy_seconds: float = 0.0   # time spent in requests' handlers (the sim: running kernels too)
    serve_seconds: float = 0.0  # time from a request's first byte read to its reply written
    bytes_to_device: int = 0
    bytes_from_device: int = 0


#: Ops whose payload goes to the device, and ops whose reply brings bytes back.
TO_DEVICE_OPS = frozenset({"htod", "htod3d", "copy_batch", "mirror_htod"})
FROM_DEVICE_OPS = frozenset({"dtoh", "dtoh3d", "mirror_dtoh"})
#: Ops whose one payload frame a lane leaves in the connection, for the
#: handler to read straight into device memory (it may exceed MAX_BUFFERED_PAYLOAD).
STREAMED_OPS = frozenset({"htod", "htod3d", "mirror_htod"})
#: Replies that carry neither device output nor an earlier asynchronous
#: failure: the client's own bookkeeping (mapped memory), not a program's call.
TRANSPARENT_OPS = frozenset({"mirror_dtoh", "mirror_wait"})
#: Zeros written at a time by mirror_zero.
ZERO_PIECE = 4 << 20


class Later:
    """A request answered once its Completion is ready: `then()` gives the
    reply (a dict, or (dict, frames)), or None for an empty one."""

    __slots__ = ("completion", "then", "reply_to", "seq", "op", "since", "watched")

    def __init__(self, completion: Completion, then=None):
        self.completion, self.then = completion, then
        # Filled in when it has to wait (DeviceService._defer):
        self.reply_to = self.seq = None
        self.op, self.since, self.watched = "", 0.0, False


class DeviceService:
    def __init__(self, context: zmq.Context, backend, index: int, bind_host: str, inbox=None,
                 peer_token: str | None = None, protect=None, lane_secret: bytes | None = None,
                 spin_us: float = 300.0, windows: SessionWindows | None = None):
        self.backend = backend
        self.index = index
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)
        if protect is not None:  # --auth: CURVE before bind (rcuda/auth.py)
            protect(self.socket)
        self.port = self.socket.bind_to_random_port(f"tcp://{bind_host}")
        # The lane: a TCP listener for the client's one lane connection,
        # sealed with keys made from `lane_secret` under --auth (rcuda/sealed.py).
        self._lane: Lane | None = None
        self._lane_secret = lane_secret
        self._lane_listener: pysocket.socket | None = _lane_listener(bind_host)
        self.lane_port: int | None = self._lane_listener.getsockname()[1] if self._lane_listener else None
        self._poller: tuple | None = None  # (what it watches, zmq.Poller)
        # How long to busy-poll for the next request after answering on the
        # lane, and for a Completion before sleeping (rcuda server --spin-us).
        self._spin = SpinPolicy(spin_us / 1e6)  # keyed by the op served last on the lane
        self._spin_seconds = spin_us / 1e6
        self._lane_served: tuple[str, float] | None = None  # (op, when) of the last lane message
        self._lane_served_in_c = False  # C served the last ones and waited awake for more already
        self._later: list[Later] = []  # requests waiting for the device, in arrival order
        self.token: str | None = None
        self.closed = threading.Event()
        self._stop = threading.Event()
        self._peer: bytes | Lane | None = None  # the connection that opened the device
        self.device = None
        self.windows = SessionWindows(backend) if windows is None else windows  # shared by the session's GPUs
        self._window = None   # this GPU's address window (the backend's reservation)
        self._fresh = False   # nothing but open (and move_window) served yet
        self._sticky: CudaError | None = None
        self._deferred: CudaError | None = None
        self._output: list[str] = []
        self._box_staging = bytearray()  # land_box's, kept for the next
        self.mirror_views = MirrorViews()  # what the client has of each mirror
        self.usage = Usage()
        self.graph_ops = GraphOps(self)  # executable CUDA graphs (server/graphs.py)
        self._forget_session_state()
        self._handlers = {
            "open": self._open, "move_window": self._move_window, "malloc": self._malloc, "free": self._free, "mem_info": self._mem_info,
            "htod": self._htod, "dtoh": self._dtoh, "dtod": self._dtod, "copy_batch": self._copy_batch,
            "memset": self._memset, "stream_mem_ops": self._stream_mem_ops,
            "htod3d": self._htod3d, "dtoh3d": self._dtoh3d, "dtod3d": self._dtod3d, "memset3d": self._memset3d,
            "array_create": self._array_create, "array_destroy": self._array_destroy,
            "texture_create": self._texture_create, "texture_destroy": self._texture_destroy,
            "surface_create": self._surface_create, "surface_destroy": self._surface_destroy,
            "texref": self._texref,
            "ipc_export": self._ipc_export, "ipc_open": self._ipc_open, "ipc_close": self._ipc_close,
            "ipc_event_export": self._ipc_event_export,
            "tensor_map_encode": self._tensor_map_encode, "tensor_map_replace": self._tensor_map_replace,
            "module": self._module, "link": self._link, "function": self._function, "func_attrs": self._func_attrs,
            "func_set_attr": self._func_set_attr, "symbol": self._symbol, "launch": self._launch,
            "launches": self._launches,
            "sync": self._sync, "stream_create": self._stream_create, "stream_destroy": self._stream_destroy,
            "stream_sync": self._stream_sync, "stream_query": self._stream_query, "stream_wait": self._stream_wait,
            "event_create": self._event_create, "event_destroy": self._event_destroy,
            "event_record": self._event_record, "event_sync": self._event_sync, "event_query": self._event_query,
            "event_elapsed": self._event_elapsed, "marker": self._marker, "stream_attr": self._stream_attr,
            "reset_persisting_l2": self._reset_persisting_l2, "reset": self._reset,
            "close": self._close,
            "mirror_htod": self._mirror_htod, "mirror_zero": self._mirror_zero, "mirror_dtoh": self._mirror_dtoh,
            "mirror_wait": self._mirror_wait,
            "vmm_create": self._vmm_create, "vmm_retain": self._vmm_retain, "vmm_release": self._vmm_release,
            "vmm_map": self._vmm_map, "vmm_unmap": self._vmm_unmap, "lib": self._lib,
            "vmm_export": self._vmm_export, "vmm_import": self._vmm_import,
        }
        # Server-to-server copies (server/peer.py): `inbox` holds the worker's
        # incoming transfers, `peer_token` authorises them.
        self.peer_ops = PeerOps(self, inbox, peer_token)
        self._handlers.update(self.peer_ops.handlers())
        self._handlers.update(self.graph_ops.handlers())
        self._thread = threading.Thread(target=self._run, name=f"rcuda GPU{index}", daemon=True)

    def _forget_session_state(self) -> None:
        """What the session created on this device, by the ids it chose."""
        self._modules: set[str] = set()
        self._functions: dict[int, tuple] = {}  # fn id -> (handle, layout)
        self._streams: set[int] = {LEGACY_STREAM}
        self._events: set[int] = set()
        self._libraries = LibraryCalls()  # cuBLAS handles, cuFFT plans, cuRAND generators
        self.graph_ops.forget()
        for token in getattr(self, "_ipc_tokens", {}).values():
            ipc.exports().withdraw(token)
        self._ipc_tokens: dict = {}  # exported allocations: start -> token; events: ("event", id) -> token

    def start(self, token: str) -> None:
        self.token = token
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._release()

    # ---------------------------------------------------------- the loop

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and not self.closed.is_set():
                self._serve_what_arrives()
                self._answer_what_is_ready()
        except Exception:  # a bug must end the session, not hang it
            log.exception("GPU%d service stopped", self.index)
            self.closed.set()
        finally:
            self._drop_later()
            self.peer_ops.close()
            self.socket.close(linger=0)
            self._close_lane()

    def _watched(self) -> tuple:
        """What the thread waits on: the socket, the lane (or its listener),
        and the device's wake-up descriptor (cupy's Completions)."""
        lane_side = self._lane if self._lane is not None else self._lane_listener
        wake = self.device.wake_fd() if self.device is not None else None
        return self.socket, lane_side.fileno() if lane_side is not None else None, wake

    def _serve_what_arrives(self) -> None:
        watched = self._watched()
        if self._poller is None or self._poller[0] != watched:
            poller = zmq.Poller()
            for item in watched:
                if item is not None:
                    poller.register(item, zmq.POLLIN)
            self._poller = (watched, poller)
        wake = watched[2]
        ready = dict(self._poller[1].poll(self._wait_ms()))
        if self.socket in ready:
            while self._socket_has_message() and not self.closed.is_set():
                self._serve_socket_message(self.socket.recv_multipart(copy=False))
        if self._lane_listener is not None and self._lane_listener.fileno() in ready:
            self._accept_lane()
        lane = self._lane
        if lane is not None and (lane.buffered or lane.fileno() in ready):
            # (C reads only what is there; Python's read would wait for it.)
            if self._serve_lane_in_c() and self._lane is not None and (lane.buffered or lane.readable()):
                self._serve_lane()
            while self._lane_buffered():
                # The last read took in (part of) the next message too, which
                # poll() cannot see: a request answered with nothing (a launch)
                # may be followed at once by another.
                if self._serve_lane_in_c():
                    self._serve_lane()
            if (self._lane is not None and self._lane_served is not None and not self._later
                    and not self._lane_served_in_c):
                # A program making synchronous calls often makes the next one
                # soon: stay awake for it a moment, if that paid after this
                # kind of message lately (rcuda/lane.py, SpinPolicy).
                self._lane.wait_readable(self._spin.window(self._lane_served[0]), also=self._socket_has_message)
        if wake is not None and wake in ready and self.device is not None:
            self.device.drain_wake_fd()

    def _wait_ms(self) -> int:
        """How long the next poll may sleep: not at all while bytes of the
        lane are read already (poll() cannot see them) or a Completion is
        being polled; until the nearest modelled deadline; else POLL_MS."""
        if self._lane_buffered():
            return 0
        if not self._later:
            return POLL_MS
        wait = POLL_MS / 1000
        now = time.perf_counter()
        for later in self._later:
            deadline = later.completion.deadline()
            if deadline is not None:
                wait = min(wait, max(deadline - now, 0.0))
            elif now - later.since < self._spin_seconds:
                return 0  # polling it: an answer within the window costs no wake-up
            elif not later.watched:
                later.completion.watch()  # from now on the device's wake fd tells
                later.watched = True
        return int(wait * 1000) + (1 if wait > 0 else 0)

    def _lane_buffered(self) -> bool:
        return self._lane is not None and self._lane.buffered

    def _socket_has_message(self) -> bool:
        return bool(self.socket.getsockopt(ZMQ_EVENTS) & ZMQ_POLLIN)

    # ---------------------------------------------------------- answers that wait

    def _defer(self, later: Later, reply_to, seq, op: str) -> None:
        later.reply_to, later.seq, later.op, later.since = reply_to, seq, op, time.perf_counter()
        self._later.append(later)

    def _answer_what_is_ready(self) -> None:
        """Answer the waiting requests whose work is done, in arrival order.

        They are looked at newest first: work ends while we look, and in one
        stream a request found done means the earlier ones are done when
        looked at after it.  Oldest first, a download could be found still
        running and the marker behind it done, and the marker answered first."""
        if not self._later:
            return
        found: list = [False] * len(self._later)  # done, or the exception that looking raised
        for i in reversed(range(len(self._later))):
            try:
                found[i] = self._later[i].completion.ready()
            except Exception as exc:  # noqa: BLE001 - answered in its turn, below
                found[i] = exc
        waiting = []
        for later, done in zip(self._later, found):
            if done is False:
                waiting.append(later)
                continue
            try:
                if isinstance(done, Exception):
                    raise done
                result = later.then() if later.then is not None else None
            except (CudaError, ProtocolError) as exc:
                later.completion.release()
                self._failed(later.reply_to, later.seq, later.op, exc, True)
                continue
            except Exception as exc:  # a backend bug: report it, keep serving
                log.exception("GPU%d: %s failed", self.index, later.op)
                later.completion.release()
                self._failed(later.reply_to, later.seq, later.op,
                             CudaError(cudaError.cudaErrorUnknown, f"server error: {exc}"), True)
                continue
            later.completion.release()
            self._respond(later.reply_to, later.seq, result)
        self._later = waiting

    def _drop_later(self) -> None:
        for later in self._later:
            later.completion.release()
        self._later = []

    # ---------------------------------------------------------- the lane

    def _accept_lane(self) -> None:
        """A lane connection: it must name this session and device first."""
        try:
            connection, _ = self._lane_listener.accept()
        except OSError:
            return
        set_timeouts(connection, LANE_READ_TIMEOUT, LANE_READ_TIMEOUT)
        lane = Lane(connection, max_payload=wire.MAX_BUFFERED_PAYLOAD)
        try:
            if self._lane_secret is not None:
                lane.seal = sealed.server_handshake(connection, self._lane_secret)
            hello, _ = lane.receive()
            token = hello.get("token")
            if (hello.get("op") != "lane" or not isinstance(token, str) or self.token is None
                    or not hmac.compare_digest(token.encode(), self.token.encode()) or hello.get("dev") != self.index):
                bad_requests.warning("GPU%d: lane connection refused: wrong session token or device", self.index)
                lane.send({"seq": None, "err": int(cudaError.cudaErrorDevicesUnavailable),
                           "msg": "wrong session token or device"})
                lane.close()
                return
            lane.send({"seq": hello.get("seq"), "err": 0})
        except (OSError, ProtocolError) as exc:
            bad_requests.warning("GPU%d: lane connection dropped during its hello: %s", self.index, exc)
            lane.close()
            return
        self._lane = lane
        self._lane_listener.close()  # one lane per device and session
        self._lane_listener = None

    def _serve_lane(self) -> None:
        """Serve one request from the lane.  The payload of an htod is left
        in the connection for _htod to read straight into device memory; any
        other payload is read first."""
        lane = self._lane
        started = time.perf_counter()
        self._lane_served_in_c = False
        try:
            head, lengths = lane.receive_head()
        except sealed.SealBroken as exc:  # someone between us and the client
            bad_requests.warning("GPU%d: lane closed: %s", self.index, exc)
            self._close_lane()
            return
        except LaneClosed:
            self._close_lane()  # the client has gone, or closed its device
            return
        except (OSError, ProtocolError) as exc:  # a stream out of step cannot be resynchronised
            bad_requests.warning("GPU%d: lane closed after a malformed message: %s", self.index, exc)
            self._close_lane()
            return
        if self._lane_served is not None:
            self._spin.waited(self._lane_served[0], time.perf_counter() - self._lane_served[1])
        try:
            header, undecodable = protocol.unpack(head), None
        except ProtocolError as exc:
            header, undecodable = None, exc
        streamed = header is not None and header.get("op") in STREAMED_OPS and len(lengths) == 1
        if not streamed and sum(lengths) > wire.MAX_BUFFERED_PAYLOAD:
            bad_requests.warning("GPU%d: lane closed: %d payload bytes (at most %d but in an htod)",
                                 self.index, sum(lengths), wire.MAX_BUFFERED_PAYLOAD)
            self._close_lane()
            return
        try:
            if streamed:
                payload = [UnreadFrame(lane, lengths[0], self._lane_stalled)]
            else:
                payload = lane.read_frames(lengths, self._lane_stalled)
            if undecodable is not None:
                self._undecodable(lane, undecodable)
            else:
                self._handle(lane, header, payload, lane)
            if streamed and payload[0].left:  # refused before it was read: out of the stream with it
                payload[0].drop_rest()
            op = header.get("op") if header is not None else None
            self._lane_served = (op if isinstance(op, str) and op in protocol.OPS else "?", time.perf_counter())
            self.usage.serve_seconds += self._lane_served[1] - started
        except LaneClosed as exc:
            log.warning("GPU%d: lane closed in the middle of a message: %s", self.index, exc)
            self._close_lane()

    def _serve_lane_in_c(self) -> bool:
        """Let C serve the lane's next requests where they are small copies
        or synchronisations (native/served_requests.c, on a GPU server);
        whether Python must serve the next message itself."""
        self._lane_served_in_c = False
        lane, device = self._lane, self.device
        server = device.request_server() if device is not None and lane is not None and lane.seal is None else None
        if (server is None or self._peer is not lane or self._sticky is not None or self._deferred is not None
                or self._output or self._later):
            # C would answer without what Python must tell first, or ahead of
            # an answer Python holds whose work may be done (see _answer_what_is_ready).
            return True
        started = time.perf_counter()
        output_fd, output_seen = device.output_position()
        # C waits awake for the next request as _serve_what_arrives would.
        idle_spin = self._spin.window(self._lane_served[0] if self._lane_served else "?")
        outcome, state = server.serve(lane.fileno(), lane.read_ahead, output_fd, output_seen, self._spin_seconds,
                                      idle_spin, device.memory_total())
        if state.consumed:
            lane.drop_read_ahead(state.consumed)
        self._lane_served_in_c = outcome == cuda_batches.SERVE_IDLE and state.served > 0  # (it waited awake)
        if state.last_op:
            now = time.perf_counter()
            self._fresh = False
            self._lane_served = (cuda_batches.SERVED_OPS[state.last_op], now)
            usage = self.usage
            usage.calls += state.served + (outcome == cuda_batches.SERVE_PENDING)
            usage.busy_seconds += now - started
            usage.serve_seconds += now - started
            usage.bytes_to_device += state.to_device
            usage.bytes_from_device += state.from_device
        if outcome == cuda_batches.SERVE_PENDING:
            pending = server.pending(state, device.wake, device.waiter_threads())
            then = (lambda: ({}, [pending.data()])) if pending.op == "dtoh" else None
            self._defer(Later(pending, then), lane, state.seq, pending.op)
        elif outcome == cuda_batches.SERVE_BROKEN:
            log.warning("GPU%d: the lane broke while answering: %s", self.index, os.strerror(state.status))
            self._close_lane()
        return outcome == cuda_batches.SERVE_PYTHON

    def _lane_stalled(self) -> None:
        raise LaneClosed(f"no bytes for {LANE_READ_TIMEOUT:g}s in the middle of a message")

    def _close_lane(self) -> None:
        for side in (self._lane, self._lane_listener):
            if side is not None:
                side.close()
        if self._peer is self._lane and self._lane is not None:
            self.closed.set()  # the session's connection is gone: so is its use of this device
        self._lane = self._lane_listener = None

    # ---------------------------------------------------------- the socket

    def _serve_socket_message(self, parts: list) -> None:
        """One message from the ZeroMQ socket."""
        if len(parts) < 2:
            return  # not even a header: nothing to answer
        started = time.perf_counter()
        peer, header_frame, payload = parts[0].bytes, parts[1], parts[2:]
        try:
            header = protocol.unpack(header_frame.buffer)
        except ProtocolError as exc:
            self._undecodable(peer, exc)
            return
        self._handle(peer, header, payload, peer)
        self.usage.serve_seconds += time.perf_counter() - started

    # -- for server/peer.py, which runs in this thread

    @property
    def sticky(self) -> CudaError | None:
        return self._sticky

    def stopping(self) -> bool:
        return self._stop.is_set()

    def notify(self, message: dict) -> None:
        """An unsolicited message to the client (seq null), e.g. a failed
        peer_push it must abort at the destination."""
        if self._peer is not None:
            self._reply(self._peer, {"seq": None, **message})

    # ---------------------------------------------------------- requests

    def _undecodable(self, reply_to, exc: ProtocolError) -> None:
        """A header that is not msgpack: answered without a seq (there is none to echo)."""
        bad_requests.warning("GPU%d: %s", self.index, exc)
        self._reply(reply_to, {"seq": None, "err": int(cudaError.cudaErrorInvalidValue), "msg": str(exc)})

    def _handle(self, peer, header: dict, payload: list, reply_to) -> None:
        """Check and serve one request from `peer` (a socket identity, or
        the lane); answer to `reply_to`."""
        seq = header.get("seq")
        answer = True
        try:
            op = protocol.check_header(header)
            answer = protocol.expects_reply(header)
            if op not in self._handlers:
                raise ProtocolError(f"{op} is not a request for a GPU socket")
            if self._peer is None and op != "open":
                raise ProtocolError(f"{op} before open")
            if self._peer is not None and peer is not self._peer and peer != self._peer:
                raise ProtocolError("this GPU belongs to another connection")
            if self._sticky is not None and op not in STICKY_EXEMPT:
                raise self._sticky
            if op != "move_window":
                self._fresh = False  # (open sets it again)
            started = time.perf_counter()
            try:
                result = self._handlers[op](header, payload)
                if type(result) is Later and answer and result.completion.ready():  # most are ready at once
                    result.completion.release()
                    result = result.then() if result.then is not None else None
            finally:
                self._count(op, payload, time.perf_counter() - started)
            if op == "open":
                self._peer = peer  # from now on, only this connection
                if peer is not self._lane and self._lane_listener is not None:
                    self._lane_listener.close()  # opened on the socket: no lane is coming
                    self._lane_listener = None
        except (CudaError, ProtocolError) as exc:
            self._failed(reply_to, seq, header.get("op"), exc, answer)
            return
        except LaneClosed:  # the lane broke under a streamed payload: not the request's fault
            raise
        except Exception as exc:  # a backend bug: report it, keep serving
            log.exception("GPU%d: %s failed", self.index, header.get("op"))
            self._failed(reply_to, seq, header.get("op"),
                         CudaError(cudaError.cudaErrorUnknown, f"server error: {exc}"), answer)
            return
        if type(result) is Later:
            if answer:
                self._defer(result, reply_to, seq, op)
            else:
                result.completion.release()
            return
        if not answer:
            self._collect_output()
            return
        self._answer_what_is_ready()  # earlier requests done by now are answered first
        self._respond(reply_to, seq, result, transparent=op in TRANSPARENT_OPS)

    def _respond(self, reply_to, seq, result, transparent: bool = False) -> None:
        """A request's reply, with an earlier asynchronous failure if one
        waits (not on a `transparent` one, which leaves it and the device
        output to the next)."""
        reply, frames = result if isinstance(result, tuple) else (result or {}, [])
        reply["seq"] = seq
        reply["err"] = 0
        if self._deferred is not None and not transparent:  # an earlier asynchronous failure
            reply["err"], reply["msg"] = int(self._deferred.status), self._deferred.message
            self._deferred = None
        self._reply(reply_to, reply, frames, with_output=not transparent)

    def _count(self, op: str, payload, seconds: float) -> None:
        usage = self.usage
        usage.calls += 1
        usage.busy_seconds += seconds
        if op in TO_DEVICE_OPS:
            usage.bytes_to_device += _payload_size(payload)

    def usage_report(self) -> dict:
        """This GPU's part of the session, as the worker reports it."""
        device = self.device
        return {"index": self.index, "memory": device.memory_in_use() if device is not None else 0,
                **asdict(self.usage)}

    def _failed(self, peer, seq, op, exc, answer: bool) -> None:
        status = exc.status if isinstance(exc, CudaError) else cudaError.cudaErrorInvalidValue
        if isinstance(exc, ProtocolError):
            bad_requests.warning("GPU%d: %s", self.index, exc)
        if isinstance(exc, CudaError) and is_sticky(status) and self._sticky is None:
            self._sticky = exc
            log.warning("GPU%d: sticky error in %s: %s", self.index, op, exc)
        if not answer or op == "mirror_wait":  # the program's next call is told (mirror_wait: too)
            if self._deferred is None and exc is not self._sticky:
                self._deferred = exc if isinstance(exc, CudaError) else CudaError(status, str(exc))
            self._collect_output()
            if not answer:
                return
        self._reply(peer, {"seq": seq, "err": int(status), "msg": str(exc)}, with_output=op != "mirror_wait")

    def _reply(self, peer, reply: dict, frames=(), with_output: bool = True) -> None:
        """Answer on the socket (`peer`: the identity), or on the lane."""
        self._collect_output()
        if self._output and with_output:
            reply["out"] = "".join(self._output)
            self._output.clear()
        if isinstance(peer, Lane):
            try:
                peer.send(reply, frames)  # returns once the kernel holds the bytes: frames are free again
            except OSError as exc:
                log.warning("GPU%d: the lane broke while answering: %s", self.index, exc)
                self._close_lane()
            return
        if not frames:
            self.socket.send_multipart([peer, protocol.pack(reply)])
            return
        # ZeroMQ passes a large reply on in pieces sooner than whole.
        frames = [piece for frame in frames for piece in protocol.chunks(frame)]
        # Frames may be views of device memory (Device.memcpy_dtoh): ZeroMQ
        # sends them from its own thread, so wait until it is done with them
        # before serving a request that could change them.  Cheaper than a copy.
        tracker = self.socket.send_multipart([peer, protocol.pack(reply), *frames], copy=False, track=True)
        tracker.wait()

    def _collect_output(self) -> None:
        if self.device is not None:
            text = self.device.take_output()
            if text:
                self._output.append(text)

    # ---------------------------------------------------------- checks

    def _stream(self, header: dict, field: str = "stream") -> int:
        stream = header[field]
        if stream not in self._streams:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"{header['op']}: unknown stream {stream}")
        return stream

    def _event(self, header: dict, field: str = "event") -> int:
        event = header[field]
        if event not in self._events:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"{header['op']}: unknown event {event}")
        return event

    def stream_id(self, header: dict) -> int:
        """The request's stream, checked (for server/graphs.py)."""
        return self._stream(header)

    @property
    def request_handlers(self) -> dict:
        return self._handlers

    def function(self, fn: int, op: str) -> tuple:
        """(handle, layout) of the session's function `fn` (for server/graphs.py)."""
        return self._function_entry({"op": op, "fn": fn})

    def _function_entry(self, header: dict) -> tuple:
        entry = self._functions.get(header["fn"])
        if entry is None:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"{header['op']}: unknown function id "
                                                                      f"{header['fn']}")
        return entry

    # ---------------------------------------------------------- session, memory

    def _open(self, header, payload):
        if self._peer is not None:
            raise ProtocolError("device already open")
        if header["token"] != self.token or header["dev"] != self.index:
            raise CudaError(cudaError.cudaErrorDevicesUnavailable, "wrong session token or device")
        self._window = self.windows.open_device(self.index, header["va_base"])
        self.device = self.backend.open_device(self.index, self._window)
        self._fresh = True
        props = dict(self.device.properties(), rcudaPeers=self.peer_ops.links(),
                     rcudaVmmGranularity=list(self.device.vmm_granularity()))
        return {"props": props, "attributes": self.device.attributes(),
                "va_base": None if self._window is None else self._window.base,
                "vmm_base": self.windows.open_vmm(self.index, header.get("vmm_base"))}

    def _move_window(self, header, payload):
        """Where the client's address space had no room for a window (see
        server/address_windows.py): only before anything was put in it."""
        if not self._fresh:
            raise CudaError(cudaError.cudaErrorInvalidValue, "move_window: only right after open")
        if header["window"] == "vmm":
            return {"base": self.windows.move_vmm(self.index, header["hint"])}
        if header["window"] != "device":
            raise ProtocolError(f"move_window: window must be 'device' or 'vmm', not {header['window']!r}")
        self._release()  # (holds nothing yet; the old window goes once the new one is reserved)
        try:
            self._window = self.windows.move_device(self.index, header["hint"])
        finally:
            self.device = self.backend.open_device(self.index, self._window)
        return {"base": self._window.base}

    def _malloc(self, header, payload):
        return {"ptr": self.device.malloc(_non_negative(header, "size"))}

    def _free(self, header, payload):
        self.mirror_views.forget(header["ptr"], self.device.extent(header["ptr"]))
        done = self.device.free(header["ptr"])  # cudaFree waits for the device
        token = self._ipc_tokens.pop(header["ptr"], None)
        if token is not None:
            ipc.exports().withdraw(token)  # no one may open it any more
        return Later(done)

    # -- CUDA IPC between sessions of this server (server/ipc.py)

    def _ipc_export(self, header, payload):
        ptr = header["ptr"]
        fd, size = self.device.ipc_export(ptr)
        return {**self._offer(ptr, fd, size), "size": size}

    def _offer(self, key, fd: int, size: int) -> dict:
        """What the session exports (`key`: an allocation's start, or
        ("event", id), ("physical", handle)) offered to this server's other
        sessions once (server/ipc.py); until it goes, or the session does."""
        if key not in self._ipc_tokens:
            self._ipc_tokens[key] = ipc.exports().export(fd, size)
        return {"worker": ipc.exports().name, "token": self._ipc_tokens[key]}

    @staticmethod
    @contextlib.contextmanager
    def _received(worker: str, token: str, own: str | None = None):
        """(descriptor, size) of another session's export, closed after;
        `own`: the call refusing this session's own exports, as CUDA refuses
        a process's own IPC handles."""
        if own is not None and ipc.exports().owns(worker):
            raise CudaError(cudaError.cudaErrorDeviceUninitialized,
                            f"{own}: the handle is this process's own (open it in another)")
        fd, size = ipc.receive(worker, token)
        try:
            yield fd, size
        finally:
            os.close(fd)

    def _ipc_open(self, header, payload):
        with self._received(header["worker"], header["token"], own="cudaIpcOpenMemHandle") as (fd, size):
            return {"ptr": self.device.ipc_open(fd, size), "size": size}

    def _ipc_close(self, header, payload):
        self.device.ipc_close(header["ptr"])

    def _mem_info(self, header, payload):
        free, total = self.device.mem_get_info()
        return {"free": free, "total": total}

    def _htod(self, header, payload):
        size, stream = _non_negative(header, "size"), self._stream(header)
        if _payload_size(payload) != size:
            raise ProtocolError(f"htod: header says {size} bytes, frames carry {_payload_size(payload)}")
        offset = 0
        for frame in payload:
            if isinstance(frame, UnreadFrame):
                land_on_device(frame, self.device, header["dst"] + offset, stream)
            else:
                self.device.memcpy_htod(header["dst"] + offset, frame.buffer, stream)
            offset += len(frame)
        return self._stream_order(header, stream)

    # -- mapped host memory (client/memory/mapped.py): the device copies of
    # the program's mapped ranges, written and read at once, outside every
    # stream, as the program's host memory would be.

    def _mirror_htod(self, header, payload):
        runs = header["runs"]
        if len(runs) % 2 or len(runs) > 2 * wire.MAX_FRAMES or not all(type(v) is int and v >= 0 for v in runs):
            raise ProtocolError(f"mirror_htod: runs must be at most {wire.MAX_FRAMES} pairs of non-negative "
                                f"integers (dst, size)")
        pairs = list(zip(runs[::2], runs[1::2]))
        if _payload_size(payload) != sum(size for _, size in pairs):
            raise ProtocolError(f"mirror_htod: the runs add up to {sum(size for _, size in pairs)} bytes, frames "
                                f"carry {_payload_size(payload)}")
        for dst, size in pairs:
            self.device.check_range(dst, size, "mapped memory")
        source = _Payload(payload)
        for dst, size in pairs:
            source.write_now(self.device, dst, size)
            self.mirror_views.host_sent(dst, size)

    def _mirror_zero(self, header, payload):
        size = _non_negative(header, "size")
        self.device.check_range(header["ptr"], size, "mapped memory")
        zeros = memoryview(bytes(min(size, ZERO_PIECE)))
        for offset in range(0, size, len(zeros) or 1):
            self.device.write_now(header["ptr"] + offset, zeros[:min(len(zeros), size - offset)])
        self.mirror_views.host_sent(header["ptr"], size)

    def _mirror_dtoh(self, header, payload):
        """The device copy of a mirror (`src`, `size`), or of its part
        [offset, offset + length), as it is now: all of it, or (`runs`: how
        many) a table of (offset in the mirror, length) little-endian pairs
        and then the bytes of the chunks that changed since the client last
        had them (server/mirror_views.py)."""
        src, size = header["src"], _non_negative(header, "size")
        offset = _non_negative(header, "offset") if "offset" in header else 0
        length = _non_negative(header, "length") if "length" in header else size - offset
        if offset + length > size:
            raise ProtocolError(f"mirror_dtoh: part {offset}..+{length} of a {size}-byte mirror")
        self.device.check_range(src, size, "mirror_dtoh")  # before its view is made
        runs = self.mirror_views.changed_runs(src, size, offset, length, self.device.chunk_digests) if length else None
        if runs is None:
            data = self.device.read_now(src + offset, length)
            self.usage.bytes_from_device += len(data)
            return {}, [_bytes_view(data)]
        pieces = [self.device.read_now(src + at, length) for at, length in runs]
        self.usage.bytes_from_device += sum(length for _, length in runs)
        return {"runs": len(runs)}, [np.array(runs, "<u8").tobytes(), *map(_bytes_view, pieces)]

    def _mirror_wait(self, header, payload):
        return Later(self.device.synchronize())

    def _dtoh(self, header, payload):
        data, done = self.device.memcpy_dtoh(header["src"], _non_negative(header, "size"), self._stream(header))
        self.usage.bytes_from_device += len(data)
        return Later(done, lambda: ({}, [_bytes_view(data)]))

    def _dtod(self, header, payload):
        self.device.memcpy_dtod(header["dst"], header["src"], _non_negative(header, "size"), self._stream(header))

    def _copy_batch(self, header, payload):
        """cudaMemcpyBatchAsync's copies within this GPU, in one stream:
        device-to-device copies and uploads whose bytes the payload carries
        back to back.  Every range is checked before anything moves."""
        stream = self._stream(header)
        copies, uploads = _groups(header, "copies", 3), _groups(header, "uploads", 2)
        if len(copies) + len(uploads) > protocol.MAX_BATCH_COPIES:
            raise ProtocolError(f"copy_batch: {len(copies) + len(uploads)} copies, more than "
                                f"{protocol.MAX_BATCH_COPIES}")
        if _payload_size(payload) != sum(size for _, size in uploads):
            raise ProtocolError(f"copy_batch: the uploads add up to {sum(size for _, size in uploads)} bytes, "
                                f"frames carry {_payload_size(payload)}")
        for dst, size in uploads:
            self.device.check_range(dst, size, "cudaMemcpyBatchAsync to device")
        self.device.memcpy_dtod_batch(copies, stream)  # checks its own ranges before copying
        data, offset = _joined(payload), 0
        for dst, size in uploads:
            if size:
                self.device.memcpy_htod(dst, data[offset:offset + size], stream)
            offset += size
        return self._stream_order(header, stream)

    def _memset(self, header, payload):
        size, elem = _non_negative(header, "size"), _element_size(header)
        if size % elem:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"memset: {size} bytes are not a whole number of "
                                                             f"{elem}-byte values")
        self.device.memset(header["ptr"], header["value"], size, self._stream(header), elem)

    def _stream_mem_ops(self, header, payload):
        """cuStreamWriteValue*/WaitValue*/BatchMemOp: operations in order, in one stream."""
        ops = header["ops"]
        if not 0 < len(ops) <= stream_memops.MAX_OPS:
            raise ProtocolError(f"stream_mem_ops: {len(ops)} operations, not 1 to {stream_memops.MAX_OPS}")
        for op in ops:
            problem = stream_memops.problem(op)
            if problem is not None:
                raise ProtocolError(f"stream_mem_ops: {problem}")
        self.device.stream_mem_ops([tuple(op) for op in ops], self._stream(header))

    # -- boxes of bytes (cudaMemcpy2D/3D, arrays): server/backends/arrays.py

    def _htod3d(self, header, payload):
        dst, extent = Place.from_wire(header["dst"], "htod3d dst"), extent_from_wire(header["extent"], "htod3d")
        if _payload_size(payload) != math.prod(extent):
            raise ProtocolError(f"htod3d: a box of {math.prod(extent)} bytes, frames carry {_payload_size(payload)}")
        stream = self._stream(header)
        if isinstance(payload[0], UnreadFrame):
            self.device.check_region(dst, extent, "cudaMemcpy3D to device")
            self._box_staging = land_box(payload[0], self.device, dst, extent, stream, self._box_staging)
        else:
            self.device.region_htod(dst, extent, _joined(payload), stream)
        return self._stream_order(header, stream)

    def _dtoh3d(self, header, payload):
        src, extent = Place.from_wire(header["src"], "dtoh3d src"), extent_from_wire(header["extent"], "dtoh3d")
        data, done = self.device.region_dtoh(src, extent, self._stream(header))
        self.usage.bytes_from_device += len(data)
        return Later(done, lambda: ({}, [_bytes_view(data)]))

    def _dtod3d(self, header, payload):
        dst, src = Place.from_wire(header["dst"], "dtod3d dst"), Place.from_wire(header["src"], "dtod3d src")
        self.device.region_dtod(dst, src, extent_from_wire(header["extent"], "dtod3d"), self._stream(header))

    def _memset3d(self, header, payload):
        dst, extent = Place.from_wire(header["dst"], "memset3d dst"), extent_from_wire(header["extent"], "memset3d")
        elem = _element_size(header)
        if dst.is_array or extent[0] % elem:
            raise CudaError(cudaError.cudaErrorInvalidValue,
                            "memset3d: an array" if dst.is_array else
                            f"memset3d: rows of {extent[0]} bytes are not a whole number of {elem}-byte values")
        self.device.region_memset(dst, header["value"], extent, self._stream(header), elem)

    def _array_create(self, header, payload):
        self.device.array_create(header["array"], ArraySpec.from_wire(header))

    def _array_destroy(self, header, payload):
        self.device.array_destroy(header["array"])

    def _texture_create(self, header, payload):
        return {"handle": self.device.texture_create(header["resource"], header["texture"], header["view"])}

    def _texture_destroy(self, header, payload):
        self.device.texture_destroy(header["handle"])

    def _surface_create(self, header, payload):
        return {"handle": self.device.surface_create(header["resource"])}

    def _surface_destroy(self, header, payload):
        self.device.surface_destroy(header["handle"])

    def _texref(self, header, payload):
        if header["surface"] not in (0, 1):
            raise ProtocolError(f"texref: surface must be 0 or 1, not {header['surface']}")
        self.device.bind_reference(self._loaded(header["module"]), header["name"], header["surface"] == 1,
                                   header["resource"], header["texture"])
        return {}

    # -- virtual memory management (client/driver/vmm.py)

    def _vmm_create(self, header, payload):
        self.device.vmm_create(header["handle"], _non_negative(header, "size"), bool(header.get("shareable")))

    def _vmm_export(self, header, payload):
        """cuMemExportToShareableHandle: offered to this server's other sessions (server/ipc.py)."""
        handle = header["handle"]
        size = self.device.physical.get(handle, "cuMemExportToShareableHandle").size
        return {**self._offer(("physical", handle), self.device.vmm_export(handle), size), "size": size}

    def _vmm_import(self, header, payload):
        with self._received(header["worker"], header["token"]) as (fd, size):
            self.device.vmm_import(header["handle"], fd, size)
        return {"size": size}

    def _vmm_retain(self, header, payload):
        self.device.vmm_retain(header["handle"])

    def _vmm_release(self, header, payload):
        self.device.vmm_release(header["handle"])  # (an export outlives it, as a shareable handle does)

    def _vmm_map(self, header, payload):
        self.windows.check_vmm(header["ptr"], _non_negative(header, "size"))
        self.device.vmm_map(header["ptr"], _non_negative(header, "size"), _non_negative(header, "offset"),
                            header["handle"])

    def _vmm_unmap(self, header, payload):
        self.mirror_views.forget(header["ptr"], self.device.extent(header["ptr"]))
        self.device.vmm_unmap(header["ptr"])

    # ---------------------------------------------------------- code

    def _module(self, header, payload):
        key = header["module"]
        if not payload:
            raise ProtocolError("module: no fatbinary image")
        if key in self._modules:
            return {"info": ""}
        info = self.device.load_module(key, bytes(_joined(payload)))
        self._modules.add(key)
        return {"info": info}

    def _link(self, header, payload):
        names, sizes = header["names"], header["sizes"]
        if (len(names) != len(sizes) or not names or not all(isinstance(n, str) for n in names)
                or not all(isinstance(s, int) and s > 0 for s in sizes) or sum(sizes) != _payload_size(payload)):
            raise ProtocolError("link: names and sizes must be lists of equal length, not empty, the sizes "
                                "positive and adding up to the payload's bytes")
        data, inputs, offset = _joined(payload), [], 0
        for name, size in zip(names, sizes):
            inputs.append((name, bytes(data[offset:offset + size])))
            offset += size
        image, info = self.device.link(inputs)
        return {"info": info}, [memoryview(image)]

    def _loaded(self, key: str) -> str:
        if key not in self._modules:
            raise CudaError(cudaError.cudaErrorInvalidKernelImage, f"module {key} was never sent")
        return key

    def _function(self, header, payload):
        offsets, sizes = header["offsets"], header["sizes"]
        if (len(offsets) != len(sizes) or not all(isinstance(v, int) and v >= 0 for v in offsets + sizes)
                or any(s == 0 for s in sizes)):
            raise ProtocolError("function: offsets and sizes must be lists of equal length of "
                                "non-negative integers (sizes positive)")
        if not isinstance(header["fn"], int) or not 0 < header["fn"] < wire.RECORD_FIRST_OP:
            raise ProtocolError(f"function: id {header['fn']!r} is not below {wire.RECORD_FIRST_OP:#x}")
        layout = ParamLayout(tuple(offsets), tuple(sizes))
        if layout.buffer_size > MAX_PARAM_BYTES:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"kernel parameters take {layout.buffer_size} "
                                                             f"bytes, more than CUDA's {MAX_PARAM_BYTES}")
        handle = self.device.get_function(self._loaded(header["module"]), header["name"], layout)
        self._functions[header["fn"]] = (handle, layout)
        if self.device.batch_executor is not None:
            self.device.batch_executor.set_function(header["fn"], handle)
        return {"attrs": self.device.function_attributes(handle)}

    def _func_attrs(self, header, payload):
        handle, _ = self._function_entry(header)
        return {"attrs": self.device.function_attributes(handle)}

    def _func_set_attr(self, header, payload):
        handle, _ = self._function_entry(header)
        self.device.function_set_attribute(handle, header["attr"], header["value"])

    def _symbol(self, header, payload):
        ptr, size = self.device.get_symbol(self._loaded(header["module"]), header["name"])
        return {"ptr": ptr, "size": size}

    def _launch(self, header, payload):
        handle, layout = self._function_entry(header)
        grid, block = _dims(header, "grid"), _dims(header, "block")
        if len(payload) != 1 or len(payload[0].buffer) != layout.buffer_size:
            raise ProtocolError(f"launch: parameter buffer must be one frame of {layout.buffer_size} bytes")
        if header["cooperative"] not in (0, 1):
            raise ProtocolError(f"launch: cooperative must be 0 or 1, not {header['cooperative']}")
        cluster = _dims(header, "cluster") if "cluster" in header else None
        self.device.launch(handle, grid, block, bytes(payload[0].buffer), _non_negative(header, "shmem"),
                           self._stream(header), cooperative=header["cooperative"] == 1, cluster=cluster)

    def _launches(self, header, payload):
        """A batch recorded by the client's C fast path.  Each record fails
        alone (the first failure is reported, as for `launch`); a sticky
        one stops the rest, as a lost context would.  A device with a batch
        executor (cupy) runs the records in C; the ones C hands back (kinds
        it leaves to Python, and any it would refuse) run here."""
        data = _joined(payload)  # a ZeroMQ link sends a batch beyond protocol.CHUNK_SIZE in chunks
        executor = self.device.batch_executor
        count = _non_negative(header, "count")
        if executor is None:
            offset, first_error = self._run_records(data, 0, count)
        else:
            offset, left, first_error = 0, count, None
            while left:
                offset, left, error = executor.run(data, offset, left, self._record_work)
                self.usage.bytes_to_device += executor.uploaded
                if error is None and left:  # the record at `offset` is Python's
                    offset, error = self._run_records(data, offset, 1)
                    left -= 1
                if error is not None:
                    if is_sticky(error.status):
                        raise error
                    first_error = first_error or error
        if offset != len(data):
            raise ProtocolError(f"launches: {len(data) - offset} bytes after the last record")
        self.usage.calls += count - 1  # each launch is a call (the message counted one)
        if first_error is not None:
            raise first_error

    def _run_records(self, data, offset: int, count: int) -> tuple[int, CudaError | None]:
        """Run `count` records from `offset` through the device: where the
        next record starts, and the first failure (a sticky one is raised)."""
        record, first_error = wire.LAUNCH_RECORD, None
        for _ in range(count):
            if offset + record.size > len(data):
                raise ProtocolError(f"launches: truncated record at byte {offset}")
            fn, shmem, gx, gy, gz, bx, by, bz, stream, nbytes = record.unpack_from(data, offset)
            if offset + record.size + nbytes > len(data):
                raise ProtocolError(f"launches: the record at byte {offset} claims {nbytes} bytes of parameters, "
                                    f"{len(data) - offset - record.size} follow")
            params = bytes(data[offset + record.size:offset + record.size + nbytes])
            offset += (record.size + nbytes + 7) & ~7
            try:
                if fn >= wire.RECORD_FIRST_OP:
                    self._recorded_op(fn, params, stream)
                    continue
                entry = self._functions.get(fn)
                if entry is None:
                    raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"launches: unknown function id {fn}")
                handle, layout = entry
                if len(params) != layout.buffer_size or stream not in self._streams:
                    raise ProtocolError(f"launches: record of function {fn} has {len(params)} parameter bytes "
                                        f"(needs {layout.buffer_size}) or an unknown stream {stream}")
                self.device.launch(handle, (gx, gy, gz), (bx, by, bz), params, shmem, stream)
            except CudaError as exc:
                if is_sticky(exc.status):
                    raise
                first_error = first_error or exc
        return offset, first_error

    def _record_work(self, fn: int) -> str:
        """What a batch record whose fn is `fn` does, for an error message."""
        if fn >= wire.RECORD_FIRST_OP:
            return {wire.RECORD_MEMSET: "cudaMemsetAsync", wire.RECORD_DTOD: "cudaMemcpyAsync device to device",
                    wire.RECORD_HTOD: "cudaMemcpyAsync host to device", wire.RECORD_EVENT: "cudaEventRecord",
                    wire.RECORD_WAIT: "cudaStreamWaitEvent"}.get(fn, f"batch record {fn:#x}")
        entry = self._functions.get(fn)
        return f"launch of kernel {getattr(entry[0], 'name', fn) if entry else fn}"

    def _recorded_op(self, kind: int, fields: bytes, stream: int) -> None:
        """A memory operation recorded in C among the launches
        (native/async_fast_path.c): checked as its own message would be."""
        if stream not in self._streams:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"launches: unknown stream {stream}")
        if kind == wire.RECORD_MEMSET and len(fields) == wire.MEMSET_FIELDS.size:
            ptr, size, value = wire.MEMSET_FIELDS.unpack(fields)
            self.device.memset(ptr, value, size, stream)
        elif kind == wire.RECORD_DTOD and len(fields) == wire.DTOD_FIELDS.size:
            dst, src, size = wire.DTOD_FIELDS.unpack(fields)
            self.device.memcpy_dtod(dst, src, size, stream)
        elif kind in (wire.RECORD_EVENT, wire.RECORD_WAIT) and len(fields) == wire.EVENT_FIELDS.size:
            (event,) = wire.EVENT_FIELDS.unpack(fields)
            if event not in self._events:
                raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"launches: unknown event {event}")
            if kind == wire.RECORD_EVENT:
                self.device.event_record(event, stream)
            else:
                self.device.stream_wait_event(stream, event)
        elif kind == wire.RECORD_GRAPH and len(fields) == wire.GRAPH_FIELDS.size:
            (graph,) = wire.GRAPH_FIELDS.unpack(fields)
            self.graph_ops.launch_whole(graph, stream)
        elif kind == wire.RECORD_HTOD and len(fields) >= wire.HTOD_FIELDS.size:
            (dst,) = wire.HTOD_FIELDS.unpack_from(fields)
            data = memoryview(fields)[wire.HTOD_FIELDS.size:]
            self.device.memcpy_htod(dst, data, stream)
            self.usage.bytes_to_device += len(data)
        else:
            raise ProtocolError(f"launches: a record of kind {kind:#x} with {len(fields)} bytes of fields")

    # ---------------------------------------------------------- streams, events

    def _stream_order(self, header: dict, stream: int) -> Later | None:
        """A synchronous copy to the device is answered once its stream has
        run it, as cudaMemcpy returns; an asynchronous one is not answered."""
        return Later(self.device.stream_synchronize(stream)) if protocol.expects_reply(header) else None

    def _sync(self, header, payload):
        return Later(self.device.synchronize())

    def _stream_create(self, header, payload):
        stream = header["stream"]
        if stream in self._streams or stream <= LEGACY_STREAM:
            raise ProtocolError(f"stream_create: id {stream} is in use or reserved")
        self.device.stream_create(stream, header["flags"], header["priority"])
        self._streams.add(stream)

    def _stream_destroy(self, header, payload):
        stream = self._stream(header)
        if stream == LEGACY_STREAM:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, "the default stream cannot be destroyed")
        self.device.stream_destroy(stream)
        self._streams.discard(stream)

    def _stream_sync(self, header, payload):
        return Later(self.device.stream_synchronize(self._stream(header)))

    def _stream_query(self, header, payload):
        return {"ready": self.device.stream_query(self._stream(header))}

    def _stream_wait(self, header, payload):
        self.device.stream_wait_event(self._stream(header), self._event(header))

    def _event_create(self, header, payload):
        """A new event; with `ipc` ([worker, token]), another process's,
        exported by `ipc_event_export` (cudaIpcOpenEventHandle)."""
        event = header["event"]
        if event in self._events or event <= 0:
            raise ProtocolError(f"event_create: id {event} is in use or reserved")
        shared = header.get("ipc")
        if shared is None:
            self.device.event_create(event, header["flags"])
        else:
            if len(shared) != 2 or not all(isinstance(v, str) for v in shared):
                raise ProtocolError("event_create: ipc must be [worker, token]")
            with self._received(*shared, own="cudaIpcOpenEventHandle") as (fd, _):
                self.device.event_open(event, header["flags"], fd)
        self._events.add(event)

    def _event_destroy(self, header, payload):
        event = self._event(header)
        self.device.event_destroy(event)
        self._events.discard(event)
        token = self._ipc_tokens.pop(("event", event), None)
        if token is not None:
            ipc.exports().withdraw(token)

    # -- tensor maps (rcuda/tensor_maps.py, client/driver/tensor_maps.py)

    def _tensor_map_encode(self, header, payload):
        fields = header["map"]
        if not all(type(v) is int or type(v) is list and all(type(x) is int for x in v) for v in fields.values()):
            raise ProtocolError("tensor_map_encode: the map's values must be integers or lists of integers")
        try:
            tensor_map = tensor_maps.TensorMap(**fields)
        except TypeError as exc:
            raise ProtocolError(f"tensor_map_encode: map: {exc}") from None
        with _invalid_tensor_map("cuTensorMapEncode"):
            return {}, [self.device.tensor_map_encode(tensor_map)]

    def _tensor_map_replace(self, header, payload):
        raw = b"".join(bytes(frame.buffer) for frame in payload)
        if len(raw) != tensor_maps.SIZE:
            raise ProtocolError(f"tensor_map_replace: a map is {tensor_maps.SIZE} bytes, not {len(raw)}")
        with _invalid_tensor_map("cuTensorMapReplaceAddress"):
            return {}, [self.device.tensor_map_replace(raw, header["address"])]

    def _ipc_event_export(self, header, payload):
        """cudaIpcGetEventHandle: the event offered to this server's other sessions."""
        event = self._event(header)
        return self._offer(("event", event), self.device.event_export(event), 0)

    def _event_record(self, header, payload):
        self.device.event_record(self._event(header), self._stream(header))

    def _event_sync(self, header, payload):
        return Later(self.device.event_synchronize(self._event(header)))

    def _event_query(self, header, payload):
        return {"ready": self.device.event_query(self._event(header))}

    def _event_elapsed(self, header, payload):
        return {"ms": float(self.device.event_elapsed_ms(self._event(header, "start"), self._event(header, "end")))}

    def _marker(self, header, payload):
        return Later(self.device.stream_synchronize(self._stream(header)))

    def _stream_attr(self, header, payload):
        self.device.stream_set_attribute(self._stream(header), header["attr"], header["value"])

    def _reset_persisting_l2(self, header, payload):
        self.device.reset_persisting_l2()

    # ---------------------------------------------------------- libraries

    def _lib(self, header, payload):
        return self._libraries.serve(self.device, header, payload, self._stream(header),
                                     protocol.expects_reply(header))

    # ---------------------------------------------------------- lifecycle

    def _reset(self, header, payload):
        """cudaDeviceReset: everything of the session on this GPU is gone,
        errors included; the device is usable again."""
        for later in self._later:
            later.completion.release()
            self._failed(later.reply_to, later.seq, later.op,
                         CudaError(cudaError.cudaErrorDevicesUnavailable, "cudaDeviceReset came first"), True)
        self._later = []
        self._release()
        self._forget_session_state()
        self.mirror_views.clear()
        self._sticky = self._deferred = None
        self.device = self.backend.open_device(self.index, self._window)

    def _close(self, header, payload):
        self.closed.set()
        self._drop_later()
        for token in self._ipc_tokens.values():  # the exports die with the session, not with the worker
            ipc.exports().withdraw(token)
        self._ipc_tokens = {}
        self._release()

    def _release(self) -> None:
        device, self.device = self.device, None
        if device is not None:
            try:
                self._libraries.release(device)
                device.close()
            except Exception:  # noqa: BLE001 - freeing must not stop the session's end
                log.exception("GPU%d: error while freeing the session's memory", self.index)




def _lane_listener(bind_host: str) -> pysocket.socket | None:
    """The lane's listener, or None if there cannot be one: then calls take
    the ZeroMQ socket."""
    try:
        return listen(bind_host)
    except OSError as exc:
        log.warning("no lane on %s (synchronous calls take the ZeroMQ socket): %s", bind_host, exc)
        return None


@contextlib.contextmanager
def _invalid_tensor_map(call: str):
    """A parameter the rules refuse is the caller's cudaErrorInvalidValue."""
    try:
        yield
    except tensor_maps.TensorMapError as exc:
        raise CudaError(cudaError.cudaErrorInvalidValue, f"{call}: {exc}") from None


def _non_negative(header: dict, field: str) -> int:
    value = header[field]
    if not isinstance(value, int) or value < 0:
        raise ProtocolError(f"{header.get('op')}: {field} must be a non-negative integer")
    return value


def _groups(header: dict, field: str, width: int) -> list[tuple[int, ...]]:
    """A flat list field of non-negative integers as tuples of `width`
    (copy_batch's [dst, src, size, ...])."""
    values = header[field]
    if len(values) % width or len(values) > width * protocol.MAX_BATCH_COPIES \
            or not all(type(v) is int and v >= 0 for v in values):
        raise ProtocolError(f"{header['op']}: {field} must be at most {protocol.MAX_BATCH_COPIES} groups of "
                            f"{width} non-negative integers")
    return [tuple(values[i:i + width]) for i in range(0, len(values), width)]


def _element_size(header: dict) -> int:
    """A memset's pattern size (its optional `elem`): 1, 2 or 4 bytes."""
    elem = header.get("elem", 1)
    if elem not in (1, 2, 4):
        raise ProtocolError(f"{header.get('op')}: elem must be 1, 2 or 4, not {elem!r:.20}")
    return elem


def land_on_device(frame: UnreadFrame, device, dst: int, stream: int, piece: int = LANE_STAGING_PIECE) -> None:
    """An htod payload still in the lane, written to device memory at `dst`:
    read straight into it when the backend keeps it in this process (the
    sim), so the bytes are copied once, by the kernel; else staged through
    host memory `piece` bytes at a time."""
    device.check_range(dst, len(frame), "cudaMemcpy to device")
    target = device.host_view(dst, len(frame), stream=stream)
    if target is not None:
        frame.read_into(target)
        return
    reusable = None
    offset = 0
    while frame.left:
        size = min(frame.left, piece)
        # A GPU's page-locked buffer, a fresh one for each piece (the copy
        # engine may still be reading the last): the network's bytes land
        # where the copy engine reads them, while it copies the last piece.
        staging = device.upload_buffer(size)
        if staging is None:
            reusable = reusable if reusable is not None else memoryview(bytearray(size))
            staging = reusable
        chunk = staging[:size]
        frame.read_into(chunk)
        device.memcpy_htod(dst + offset, chunk, stream)
        offset += size


def land_box(frame: UnreadFrame, device, dst, extent, stream: int, staging: bytearray) -> bytearray:
    """An htod3d payload still in the lane, landed a few MiB of whole rows
    at a time: each part is read into `staging` (kept warm in the cache,
    and reused: returned, perhaps grown) and written by the backend while
    the next is still arriving."""
    width, height, depth = extent
    rows = max(1, min(height, LANE_STAGING_PIECE // width))
    if len(staging) < rows * width:
        staging = bytearray(rows * width)
    view = memoryview(staging)
    for z in range(depth):
        for y in range(0, height, rows):
            count = min(rows, height - y)
            part = view[:count * width]
            frame.read_into(part)
            device.region_htod(dst.at(y, z), (width, count, 1), part, stream)
    return staging


class _Payload:
    """A request's payload frames read in order, a run at a time, whatever
    their boundaries (a frame per run on a lane, 1 MiB pieces on ZeroMQ);
    a frame still in the lane is read straight where it goes."""

    def __init__(self, frames):
        self._frames = list(frames)
        self._index = self._offset = 0

    def write_now(self, device, dst: int, size: int, piece: int = LANE_STAGING_PIECE) -> None:
        """The next `size` bytes to device address `dst`, at once (Device.write_now)."""
        while size:
            frame = self._frames[self._index]
            length = min(size, len(frame) - self._offset)
            if isinstance(frame, UnreadFrame):
                target = device.host_view(dst, length)  # no stream: the copy has no place in any
                if target is not None:
                    frame.read_into(target)
                else:
                    staging = memoryview(bytearray(min(length, piece)))
                    for at in range(0, length, len(staging)):
                        chunk = staging[:min(len(staging), length - at)]
                        frame.read_into(chunk)
                        device.write_now(dst + at, chunk)
            else:
                device.write_now(dst, frame.buffer[self._offset:self._offset + length])
            dst, size, self._offset = dst + length, size - length, self._offset + length
            if self._offset == len(frame):
                self._index, self._offset = self._index + 1, 0


def _payload_size(payload) -> int:
    return sum(len(f) for f in payload)


def _joined(payload) -> memoryview:
    """A request's payload frames as one buffer (bulk bytes on a ZeroMQ
    socket come in frames of at most protocol.CHUNK_SIZE)."""
    return payload[0].buffer if len(payload) == 1 else memoryview(b"".join(f.buffer for f in payload))


def _bytes_view(data) -> memoryview:
    view = memoryview(data)
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _dims(header: dict, field: str) -> tuple[int, int, int]:
    value = header[field]
    if len(value) != 3 or not all(isinstance(v, int) and 0 < v < 2**32 for v in value):
        raise ProtocolError(f"launch: {field} must be three positive 32-bit integers")
    return tuple(value)


def _answered(header: dict) -> bool:
    """Whether a request gets a reply, when its header may be malformed."""
    try:
        protocol.check_header(header)
        return protocol.expects_reply(header)
    except ProtocolError:
        return True
