"""`SocketLink`: a device's link on its ZeroMQ socket (servers with --auth,
whose sockets are CURVE-encrypted, or when the lane cannot be reached); see
client/transport/link.py for what a link offers.

Application threads append messages to the outbox; whoever holds the
socket sends them in order, with the launches C recorded sealed in before
each, and hands every reply to whoever awaits it: a waiting call
(`Pending`) or a callback.  A `Gate` in the outbox holds back what follows
it until it opens.

Who holds the socket (ZeroMQ sockets are not thread-safe): a synchronous
caller that finds it free drives it itself until its reply comes (no
thread hand-off either way: a round trip costs what a bare ZeroMQ one
does), sending what other threads post meanwhile (they wake it through the
eventfd); otherwise the forwarding thread, which sleeps on the socket's
file descriptor and the eventfd (also written by C when it records the
first launch of a batch).  Whoever lets the socket go leaves no reply
unread, so the descriptor signals the next one.
"""
from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
import time

import zmq

from rcuda import protocol
from rcuda.errors import ProtocolError, TransportError

from .link import Gate, Link, failed_call, server_silent

log = logging.getLogger(__name__)
#: Plain ints for the checks made on every message (pyzmq's are enum members).
ZMQ_EVENTS, ZMQ_POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)

#: How often a waiting call looks at the server's liveness.
WAIT_SLICE = 0.2
#: How long a caller driving the socket first waits for its reply in a plain
#: blocking recv, before it also watches for other threads' posts.
DRIVE_FIRST_WAIT_MS = 2
#: Runs of mapped memory's dirty pages one mirror_htod message carries at most.
MIRROR_RUNS = 32


class Pending:
    """One synchronous call waiting for its reply."""

    __slots__ = ("_done", "header", "frames", "error", "into", "resolved")

    def __init__(self, into=None):
        self._done = threading.Lock()
        self._done.acquire()
        self.header: dict | None = None
        self.frames: list = []
        self.error: BaseException | None = None
        self.into = into
        self.resolved = False

    def resolve(self, header=None, frames=(), error=None) -> None:
        self.header, self.frames, self.error = header, _landed(frames, self.into), error
        self.resolved = True
        self._done.release()

    def wait(self, seconds: float) -> bool:
        return self._done.acquire(timeout=seconds)


class ReplyCallback:
    """A reply that goes to `callback(header, frames, error)` in the
    forwarding thread, which must not block."""

    __slots__ = ("callback", "into")

    def __init__(self, callback, into=None):
        self.callback, self.into = callback, into

    def resolve(self, header=None, frames=(), error=None) -> None:
        try:
            self.callback(header, _landed(frames, self.into), error)
        except Exception:  # noqa: BLE001 - never let a callback stop the forwarding thread
            log.exception("reply callback failed")


def _landed(frames, into) -> list:
    """A payload of exactly len(into) bytes (in the 1 MiB frames a server
    sends on ZeroMQ) is written into `into`, as the lane's C side does;
    then no frames are returned."""
    frames = list(frames)
    if into is not None and frames:
        target = memoryview(into).cast("B")
        if sum(len(f.buffer) for f in frames) == len(target):
            offset = 0
            for frame in frames:
                target[offset:offset + len(frame.buffer)] = frame.buffer
                offset += len(frame.buffer)
            return []
    return frames


class SocketLink(Link):
    def __init__(self, context: zmq.Context, endpoint: str, label: str, timeout: float,
                 liveness=lambda: time.monotonic(), socket_options: dict | None = None, batch_source=None,
                 mirror_source=None):
        super().__init__()
        self.label = label  # "GPU1 (host:port)", for messages
        self.timeout = timeout
        self.stats = None  # client/stats.py Stats, with RCUDA_STATS=1
        self._liveness = liveness  # -> monotonic time the server was last heard from
        self._seq = itertools.count(1)
        self._outbox: collections.deque = collections.deque()
        self._pending: dict[int, object] = {}
        self._closing = False
        # The launches C recorded (client/transport/fast_path.py): sealed into the
        # outbox before anything else is posted, so they keep their place in
        # each thread's program order.
        self._batch_source = batch_source
        self._records_shipped = 0
        # The device's mapped memory (client/transport/fast_path.py, MirrorSource): the
        # host's writes sent before each message, as C does on a lane
        # (native/mapped_memory.c).
        self._mirror_source = mirror_source
        self._post_lock = threading.Lock()
        self._socket_lock = threading.Lock()  # whoever uses the socket: a caller, or the forwarding thread
        self.wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._socket = context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, 0)  # never drop or block on queued work
        self._socket.setsockopt(zmq.RCVHWM, 0)
        self._socket.setsockopt(zmq.RCVTIMEO, DRIVE_FIRST_WAIT_MS)
        for option, value in (socket_options or {}).items():
            self._socket.setsockopt(option, value)
        self._socket.connect(endpoint)
        self._thread = threading.Thread(target=self._run, name=f"rcuda {label}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------- app threads

    def call(self, header: dict, frames=(), into=None, urgent: bool = False) -> tuple[dict, list]:
        """`urgent`: ahead of everything queued, gates too (mapped memory's
        download, which a host function's gate may be waiting for)."""
        op = header["op"]
        pending = Pending(into)
        self._enqueue(op, (header, frames), pending, wake=False, urgent=urgent)
        if self._socket_lock.acquire(blocking=False):
            try:
                if not self._socket.closed:
                    self._drive_until(pending, op)
            finally:
                self._socket_lock.release()
                if self._pending or self._outbox:
                    self._wake()  # the forwarding thread watches for them from now on
        else:
            self._wake()  # whoever holds the socket sends it
        while not pending.wait(WAIT_SLICE):
            self._check_server_alive(op)
        if pending.error:
            raise failed_call(self._failure, op, self.label) if pending.error is self._failure else pending.error
        return pending.header, pending.frames

    def post(self, header: dict, frames=(), borrowed: bool = False) -> None:
        """(Frames are sent from where they are, borrowed or not: ZeroMQ
        copies them when the message goes out.)"""
        self._enqueue(header["op"], (header, frames))

    def post_awaited(self, header: dict, frames, callback, into=None) -> None:
        self._enqueue(header["op"], (header, frames), ReplyCallback(callback, into))

    def add_gate(self, gate: Gate) -> None:
        with self._post_lock:
            self._seal_batch()
            self._outbox.append(gate)
        if not gate.attach(self, None):
            self.gate_opened(gate)

    def gate_opened(self, gate: Gate) -> None:
        self._wake()

    def _enqueue(self, op: str, item, receiver=None, wake: bool = True, urgent: bool = False) -> None:
        if self._failure:
            raise failed_call(self._failure, op, self.label)
        with self._post_lock:
            if not urgent:
                self._seal_batch()
            header = item[0]
            header["seq"] = next(self._seq)
            if receiver is not None:
                self._pending[header["seq"]] = receiver
            if urgent:
                self._outbox.appendleft(item)
            else:
                self._outbox.append(item)
        if wake:
            self._wake()

    def _drive_until(self, pending: Pending, op: str) -> None:
        """Use the socket (under _socket_lock) until `pending` is answered:
        send what is queued, hand every reply to its receiver."""
        socket, poller = self._socket, None
        while True:
            with self._post_lock:
                self._seal_batch()
            self._send_outbox()
            self._receive_replies()
            if pending.resolved or self._failure is not None:
                return
            if poller is None:
                # A blocking recv first, as a bare ZeroMQ client makes: no
                # poller, no extra system calls; most replies come within it.
                try:
                    self._dispatch(socket.recv_multipart(copy=False))  # RCVTIMEO: DRIVE_FIRST_WAIT_MS
                    continue
                except zmq.Again:
                    poller = zmq.Poller()  # a longer wait: others' posts wake it too
                    poller.register(socket, zmq.POLLIN)
                    poller.register(self.wake_fd, zmq.POLLIN)
            if self.wake_fd in dict(poller.poll(int(WAIT_SLICE * 1000))):
                self._drain_wake_fd()
            self._check_server_alive(op)

    def _seal_batch(self) -> None:
        """Move the launches C recorded into the outbox (under _post_lock)."""
        if self._batch_source is None:
            return
        taken = self._batch_source()
        if taken is not None:
            count, data = taken
            self._records_shipped += count
            self._outbox.append(({"op": "launches", "count": count, "seq": next(self._seq)}, [data]))

    def _wake(self) -> None:
        try:
            os.eventfd_write(self.wake_fd, 1)
        except OSError:
            pass  # closed: the link is gone

    def _check_server_alive(self, op: str) -> None:
        if self._failure:
            raise failed_call(self._failure, op, self.label)
        if time.monotonic() - self._liveness() > self.timeout:
            raise failed_call(server_silent(self.timeout), op, self.label)

    def heard(self, when: float) -> None:
        """(The liveness callable tells this link.)"""

    def _release_waiters(self, error: TransportError) -> None:
        for seq in list(self._pending):
            receiver = self._pending.pop(seq, None)
            if receiver:
                receiver.resolve(error=error)

    def calls_in_c(self) -> int:
        return 0

    def records_shipped(self) -> int:
        """Launches (and memsets, copies) C recorded and this link sent."""
        return self._records_shipped

    def close(self) -> None:
        self._closing = True
        self._wake()
        self._thread.join(timeout=self.timeout)

    # ---------------------------------------------------------- the thread

    def _drain_wake_fd(self) -> None:
        try:
            os.eventfd_read(self.wake_fd)
        except BlockingIOError:
            pass

    def _run(self) -> None:
        # The socket's descriptor, not the socket: polling it only reads
        # whether it signalled, so a caller may drive the socket meanwhile.
        # It is watched only while a reply is awaited (or notices may come).
        watch_socket, wake_only = zmq.Poller(), zmq.Poller()
        watch_socket.register(self._socket.getsockopt(zmq.FD), zmq.POLLIN)
        for poller in (watch_socket, wake_only):
            poller.register(self.wake_fd, zmq.POLLIN)
        try:
            while not self._closing:
                expecting = self._pending or self.on_notice is not None
                (watch_socket if expecting else wake_only).poll(int(WAIT_SLICE * 1000))
                self._drain_wake_fd()
                with self._socket_lock:
                    with self._post_lock:
                        self._seal_batch()
                    self._send_outbox()
                    # Always, not only when the descriptor signalled: sending
                    # may have consumed the signal of a reply that came meanwhile.
                    self._receive_replies()
            with self._socket_lock:
                self._send_outbox()
        except Exception as exc:  # a bug here must not hang the application
            log.exception("forwarding thread of %s stopped", self.label)
            self.fail(TransportError(f"its forwarding thread stopped: {exc}"))
        finally:
            with self._socket_lock:
                self._socket.close(linger=0)
                os.close(self.wake_fd)

    def _send_outbox(self) -> None:
        """Send what is queued, in order, up to a closed gate."""
        outbox = self._outbox
        while outbox:
            item = outbox[0]
            if type(item) is Gate:
                if not item.opened:
                    return  # its opening wakes us again
                outbox.popleft()
                continue
            header, frames = outbox.popleft()
            frames = [piece for frame in frames for piece in protocol.chunks(memoryview(getattr(frame, "buffer",
                                                                                                frame)).cast("B"))]
            try:
                self._send_mirrors()  # what the program wrote to mapped memory before it
                if header["op"] == "mirror_dtoh" and self._mirror_source is not None:
                    self._mirror_source.download_sent(header["src"])  # its place among the flushes
                if frames:
                    self._socket.send(protocol.pack(header), zmq.SNDMORE)
                    self._socket.send_multipart(frames, copy=False)
                else:
                    self._socket.send(protocol.pack(header))
            except zmq.ZMQError as exc:
                log.exception("socket of %s failed", self.label)
                self.fail(TransportError(f"its socket failed: {exc}"))
                return

    def _send_mirrors(self) -> None:
        """The dirty pages of the device's mapped memory, as mirror_htod
        messages of up to MIRROR_RUNS runs (under _socket_lock)."""
        runs = self._mirror_source.take() if self._mirror_source is not None else None
        for first in range(0, len(runs or ()), MIRROR_RUNS):
            group = runs[first:first + MIRROR_RUNS]
            header = {"op": "mirror_htod", "seq": next(self._seq), "runs": [v for dst, data in group
                                                                            for v in (dst, len(data))]}
            self._socket.send(protocol.pack(header), zmq.SNDMORE)
            self._socket.send_multipart([piece for _, data in group for piece in protocol.chunks(data)])

    def _receive_replies(self) -> None:
        socket = self._socket
        # ZMQ_EVENTS, not recv until zmq.Again: the exception cost ~4 us a reply.
        while socket.getsockopt(ZMQ_EVENTS) & ZMQ_POLLIN:
            self._dispatch(socket.recv_multipart(copy=False))

    def _dispatch(self, parts: list) -> None:
        try:
            header = protocol.unpack(parts[0].buffer)
            seq = header.get("seq")
        except ProtocolError as exc:
            log.error("%s sent an unreadable reply: %s", self.label, exc)
            return
        if seq is None and header.get("notice"):
            self._hand_notice(header)
            return
        receiver = self._pending.pop(seq, None)
        if receiver is None:
            log.warning("%s: reply to unknown request %r ignored", self.label, seq)
            return
        receiver.resolve(header, parts[1:])
