"""The forwarding path of one remote device.

Each remote device has one `DeviceChannel`, owning the device's ZeroMQ
socket; a lock (`_socket_lock`) says who may use the socket at a time.

Asynchronous calls (launches) append their message to the outbox and wake
the channel's forwarding thread through an eventfd; the thread sends the
outbox under the lock, so the application never waits for the network.

Synchronous calls do their round trip in the calling thread: under the lock
they send what is still in the outbox (so the device sees messages in the
order they were made), send the request, and wait on the socket for the
reply themselves.  That saves two thread hand-offs per call (application ->
forwarding thread, and back), which on a small virtual machine, where waking
a thread on an idle vCPU costs tens of microseconds, were most of what the
forwarding path added to a bare ZeroMQ round trip (benchmarks/README).  A
thread waiting for its reply also forwards what other threads post
meanwhile, and a reply it receives for another thread's call resolves that
call.  One channel per device means threads driving different devices
proceed in parallel, each on its own connection.

A call that waits has no fixed deadline (a long kernel is not a failure):
it fails only when the server has shown no sign of life for `timeout`
seconds, as judged by the session's heartbeats (`liveness`).
"""
from __future__ import annotations

import collections
import itertools
import logging
import os
import select
import threading
import time

import zmq

from rcuda import protocol
from rcuda.errors import ProtocolError, ServerTimeout, TransportError

log = logging.getLogger(__name__)

#: How often a waiting call re-checks the server's liveness.
WAIT_SLICE = 0.2


class Pending:
    """One synchronous call waiting for its reply."""

    __slots__ = ("_done", "header", "frames", "error")

    def __init__(self):
        self._done = threading.Lock()
        self._done.acquire()
        self.header: dict | None = None
        self.frames: list = []
        self.error: BaseException | None = None

    def resolve(self, header=None, frames=(), error=None) -> None:
        self.header, self.frames, self.error = header, list(frames), error
        self._done.release()

    def wait(self, seconds: float) -> bool:
        return self._done.acquire(timeout=seconds)

    @property
    def done(self) -> bool:
        return not self._done.locked()


class DeviceChannel:
    """Owns the socket of one remote device; see the module's docstring."""

    def __init__(self, context: zmq.Context, endpoint: str, label: str, timeout: float,
                 liveness=lambda: time.monotonic(), socket_options: dict | None = None):
        self.label = label  # "GPU1 (host:port)", for messages
        self.timeout = timeout
        self._liveness = liveness  # -> monotonic time the server was last heard from
        self._seq = itertools.count(1)
        self._outbox: collections.deque = collections.deque()
        self._pending: dict[int, Pending] = {}
        self._failure: TransportError | None = None
        self._closing = False
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._socket = context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, 0)  # never drop or block on queued async work
        self._socket.setsockopt(zmq.RCVHWM, 0)
        for option, value in (socket_options or {}).items():
            self._socket.setsockopt(option, value)
        self._socket.connect(endpoint)
        self._socket_lock = threading.Lock()  # held by whoever uses the socket
        self._poller = zmq.Poller()  # used under the lock, by a waiting call
        self._poller.register(self._socket, zmq.POLLIN)
        self._poller.register(self._wake_fd, zmq.POLLIN)
        self._thread = threading.Thread(target=self._run, name=f"rcuda {label}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------- app threads

    def post(self, header: dict, frames=()) -> int:
        """Send without waiting (asynchronous ops).  Returns the seq."""
        if self._failure:
            raise self._failure
        seq = header["seq"] = next(self._seq)
        self._outbox.append((header, frames))
        os.eventfd_write(self._wake_fd, 1)
        return seq

    def start_call(self, header: dict, frames=()) -> Pending:
        """Send a request whose reply will be waited for with `finish_call`."""
        if self._failure:
            raise self._failure
        pending = Pending()
        with self._socket_lock:
            seq = header["seq"] = next(self._seq)
            self._pending[seq] = pending
            self._outbox.append((header, frames))  # after what was posted before
            self._guarded(self._send_outbox)
        return pending

    def finish_call(self, pending: Pending, op: str) -> tuple[dict, list]:
        """Wait for `pending`'s reply, receiving it in this thread."""
        while not pending.done:
            if self._socket_lock.acquire(timeout=WAIT_SLICE):
                try:
                    self._guarded(lambda: self._receive_until(pending, op))
                finally:
                    self._socket_lock.release()
            elif not pending.done:  # another thread is receiving: it may get ours
                self._check_alive(op)
        if pending.error:
            raise pending.error
        return pending.header, pending.frames

    def _receive_until(self, pending: Pending, op: str) -> None:
        """Under the lock: forward the outbox and receive replies until
        `pending` has its own."""
        while not pending.done:
            ready = dict(self._poller.poll(int(WAIT_SLICE * 1000)))
            if self._wake_fd in ready:
                self._read_wake()
            self._send_outbox()  # what other threads posted meanwhile
            if self._socket in ready:
                self._receive_replies()
            elif not pending.done:
                self._check_alive(op)

    def _check_alive(self, op: str) -> None:
        if self._failure:
            raise self._failure
        silent_for = time.monotonic() - self._liveness()
        if silent_for > self.timeout:
            raise ServerTimeout(f"{op} on {self.label}: no reply and no heartbeat for "
                                f"{silent_for:.1f}s (RCUDA_TIMEOUT={self.timeout:g}s)")

    def _guarded(self, action) -> None:
        """Run a socket action; a ZeroMQ failure fails the channel."""
        try:
            action()
        except zmq.ZMQError as exc:
            self.fail(TransportError(f"{self.label}: {exc}"))
            raise self._failure from None

    def call(self, header: dict, frames=()) -> tuple[dict, list]:
        """Send a request and wait for its reply: (header, payload frames)."""
        return self.finish_call(self.start_call(header, frames), header["op"])

    def fail(self, error: TransportError) -> None:
        """The server is gone: fail every waiting and future call."""
        if self._failure is None:
            self._failure = error
        for seq in list(self._pending):
            pending = self._pending.pop(seq, None)
            if pending:
                pending.resolve(error=error)
        try:
            os.eventfd_write(self._wake_fd, 1)  # wake a waiting call to see it
        except OSError:
            pass  # already closed: nobody is waiting

    def close(self) -> None:
        self._closing = True
        os.eventfd_write(self._wake_fd, 1)
        self._thread.join(timeout=self.timeout)

    @property
    def failed(self) -> bool:
        return self._failure is not None

    # ---------------------------------------------------------- the thread

    def _run(self) -> None:
        """Forward posted messages: wait on the eventfd (never on the socket,
        which waiting calls use), then send the outbox under the lock."""
        wake = select.poll()
        wake.register(self._wake_fd, select.POLLIN)
        try:
            while not self._closing:
                wake.poll()
                with self._socket_lock:
                    self._read_wake()
                    self._send_outbox()
            with self._socket_lock:
                self._send_outbox()
        except Exception as exc:  # a bug here must not hang the application
            log.exception("forwarding thread of %s stopped", self.label)
            self.fail(TransportError(f"forwarding thread of {self.label} stopped: {exc}"))
        finally:
            with self._socket_lock:
                self._socket.close(linger=0)
            os.close(self._wake_fd)

    def _read_wake(self) -> None:
        try:
            os.eventfd_read(self._wake_fd)
        except BlockingIOError:
            pass

    def _send_outbox(self) -> None:
        outbox, socket = self._outbox, self._socket
        while outbox:
            header, frames = outbox.popleft()
            if frames:
                socket.send(protocol.pack(header), zmq.SNDMORE)
                socket.send_multipart(frames, copy=False)
            else:
                socket.send(protocol.pack(header))

    def _receive_replies(self) -> None:
        while True:
            try:
                parts = self._socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                header = protocol.unpack(parts[0].buffer)
                seq = header.get("seq")
            except ProtocolError as exc:
                log.error("%s sent an unreadable reply: %s", self.label, exc)
                continue
            pending = self._pending.pop(seq, None)
            if pending is None:
                log.warning("%s: reply to unknown request %r ignored", self.label, seq)
                continue
            pending.resolve(header, parts[1:])
