"""The forwarding thread of one remote device.

Each remote device has one `DeviceChannel`: a thread that drives the
device's ZeroMQ socket.  Application threads append a message to the
channel's outbox and wake the thread through an eventfd (thread-safe, and
pollable next to the socket).  Asynchronous calls return at once; a
synchronous call waits on its own `Pending`.  One thread per device means
threads driving different devices proceed in parallel, each on its own
connection, and the order of a device's messages is the order they were
posted.

A synchronous call skips the two thread hand-offs when it can (`call`): if
no other thread is using the socket, the caller takes the socket lock,
sends what is queued and its own request, and waits for its reply itself,
for at most `DIRECT_WINDOW_MS`; then (a long kernel, a slow server) it hands
the socket back to the forwarding thread and waits like any other call.
Only one thread uses the socket at a time (ZeroMQ sockets are not
thread-safe): the forwarding thread sleeps on the socket's file descriptor,
which only signals, and takes the lock before touching the socket; whoever
holds the lock leaves no reply unread when it lets go, so the descriptor
signals again for the next one.

Where the server offers one (no --auth), a synchronous call goes on the
device's lane instead (rcuda/lane.py): a plain TCP connection on which the
caller sends its request and reads its reply itself, with no ZeroMQ thread
in between.  It sends what is queued on the socket first and tells the
server how many messages came before it there (`after`), so the server
serves those first.  A call takes the lane only when no other reply is
awaited on the socket (replies are then seen in the order the requests were
made, e.g. the pieces of a copy) and no gate holds the outbox back.

A call that waits has no fixed deadline (a long kernel is not a failure):
it fails only when the server has shown no sign of life for `timeout`
seconds, as judged by the session's heartbeats (`liveness`).

Two more things ride in the outbox's order:
  * a reply can go to a callback instead of a waiting thread (an
    asynchronous device-to-host copy fills the program's buffer when its
    bytes arrive, in reply order, so a later synchronisation sees them);
  * a `Gate` holds back everything posted after it until it is opened
    (a host function in a stream runs after the work before it and before
    the work after it; replies keep flowing meanwhile).
"""
from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import socket as pysocket
import threading
import time

import zmq

from rcuda import protocol
from rcuda.errors import ProtocolError, ServerTimeout, TransportError
from rcuda.lane import LANE_MAX_PAYLOAD, Lane, SpinPolicy, set_timeouts

from .lane_share import LaneShare

log = logging.getLogger(__name__)
#: Plain ints for the checks made on every message (pyzmq's are enum members,
#: a microsecond a time to combine).
ZMQ_EVENTS, ZMQ_POLLIN = int(zmq.EVENTS), int(zmq.POLLIN)

#: How often a waiting call re-checks the server's liveness.
WAIT_SLICE = 0.2

#: How long a synchronous caller waits for its reply on the socket itself
#: before handing the socket back to the forwarding thread.  Most calls are
#: answered within a millisecond; what other threads post to this device
#: meanwhile goes out when a reply arrives or the window ends, in order.
DIRECT_WINDOW_MS = 2

#: How C's call on the lane failed (native/sync_fast_path.c, enum lane_failure).
LANE_FAILURES = {1: "cannot send or receive", 2: "closed by the server", 3: "malformed reply",
                 4: "reply out of step", 5: "server silent"}
LANE_BAD_REPLY, LANE_WRONG_SEQ, LANE_SERVER_SILENT = 3, 4, 5

#: How long a synchronous call waits for the lane while the forwarding
#: thread posts launches on it (a single write) rather than take the socket.
LANE_POST_WAIT = 0.005


class LaneLoan:
    """A lane lent out by `DeviceChannel.lane_on_loan`."""

    def __init__(self, fd: int, after: int):
        self.fd = fd  # the connection's descriptor
        self.after = after  # `after` for the borrower's requests: socket messages before them
        self.sent = 0  # messages the borrower sent, told back by it


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
    def resolved(self) -> bool:
        return not self._done.locked()


class ReplyCallback:
    """A reply that goes to `callback(header, frames, error)` in the thread
    that receives it (the forwarding thread, or a synchronous caller on its
    direct path), which must not block."""

    __slots__ = ("callback",)

    def __init__(self, callback):
        self.callback = callback

    def resolve(self, header=None, frames=(), error=None) -> None:
        try:
            self.callback(header, frames, error)
        except Exception:  # noqa: BLE001 - never let a callback stop the forwarding thread
            log.exception("reply callback failed")


class Gate:
    """Holds back the messages posted after it until `open()`."""

    __slots__ = ("opened", "_channel")

    def __init__(self):
        self.opened = False
        self._channel: DeviceChannel | None = None

    def open(self) -> None:
        self.opened = True
        if self._channel is not None:
            self._channel.wake()


class DeviceChannel:
    """Owns the socket of one remote device, in a thread of its own."""

    def __init__(self, context: zmq.Context, endpoint: str, label: str, timeout: float,
                 liveness=lambda: time.monotonic(), socket_options: dict | None = None, batch_source=None,
                 lane_address: tuple[str, int] | None = None, lane_hello: dict | None = None,
                 lane_spin_us: float = 300.0, lane_share: LaneShare | None = None):
        self.label = label  # "GPU1 (host:port)", for messages
        self.timeout = timeout
        self._liveness = liveness  # -> monotonic time the server was last heard from
        self._seq = itertools.count(1)
        self._outbox: collections.deque = collections.deque()
        self._pending: dict[int, Pending] = {}
        self._failure: TransportError | None = None
        self._closing = False
        # Launches recorded in C (client/fast_path.py): sealed into the outbox
        # under this lock before anything else is posted, so they keep their
        # place in each thread's program order.
        self._batch_source = batch_source
        self._post_lock = threading.Lock()
        # Held by whoever uses the socket: the forwarding thread, or a
        # synchronous caller waiting for its reply directly (see `call`).
        self._socket_lock = threading.Lock()
        self.stats = None  # client/stats.py Stats, with RCUDA_STATS=1
        #: callable(header) for unsolicited server messages ({seq: null,
        #: notice: ...}), called by the thread receiving; see client/peer.py.
        self.on_notice = None
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._socket = context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.SNDHWM, 0)  # never drop or block on queued async work
        self._socket.setsockopt(zmq.RCVHWM, 0)
        self._socket.setsockopt(zmq.RCVTIMEO, DIRECT_WINDOW_MS)  # bounds a caller's blocking recv
        for option, value in (socket_options or {}).items():
            self._socket.setsockopt(option, value)
        self._socket.connect(endpoint)
        # The messages sent on the socket (a lane message's `after`) and on
        # the lane (a socket message's `lane_after`), counted together so
        # they give the server one order over the two channels; and the
        # lane's lock: whoever holds it uses the lane (for a whole call, or a
        # moment to post launches: _lane_posting).  Inside the interposer C
        # shares both, for the synchronous calls it makes itself.
        self._share = lane_share or LaneShare()
        self._lane_lock = self._share
        self._lane_posting = False
        # How long a caller on the lane busy-polls for its reply before it
        # sleeps (RCUDA_SPIN_US; rcuda/lane.py, Lane.wait_readable).
        self._lane_spin = SpinPolicy(lane_spin_us / 1e6)  # per op, under _lane_lock
        self._lane: Lane | None = self._open_lane(lane_address, lane_hello) if lane_address else None
        if self._lane is not None:
            with self._lane_lock:
                self._share.attach(self._lane.fileno(), lane_spin_us / 1e6)
            self._publish_open()
        self.lane_calls = 0  # synchronous calls answered on the lane
        self._thread = threading.Thread(target=self._run, name=f"rcuda {label}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------- app threads

    @property
    def wake_fd(self) -> int:
        """The eventfd that wakes the forwarding thread (C writes it too)."""
        return self._wake_fd

    def post(self, header: dict, frames=()) -> int:
        """Send without waiting (asynchronous ops).  Returns the seq."""
        if self._failure:
            raise self._failed_call(header["op"])
        self._enqueue((header, frames))
        return header["seq"]

    def _enqueue(self, item, receiver=None) -> None:
        with self._post_lock:
            self._share.set_open(False)  # C's calls must not overtake it
            self._seal_batch()
            if type(item) is not Gate:
                self._register(item[0], receiver)
            self._outbox.append(item)
        os.eventfd_write(self._wake_fd, 1)

    def _register(self, header: dict, receiver) -> None:
        """Number a message (under _post_lock) and note who gets its reply."""
        header["seq"] = next(self._seq)
        if receiver is not None:
            self._pending[header["seq"]] = receiver

    def _seal_batch(self) -> None:
        """Move the launches C recorded into the outbox (under _post_lock)."""
        batch = self._take_batch()
        if batch is not None:
            self._outbox.append(batch)

    def _take_batch(self) -> tuple[dict, list] | None:
        """The launches C recorded since the last call, as one `launches`
        message (under _post_lock), or None."""
        if self._batch_source is None:
            return None
        taken = self._batch_source()
        if taken is None:
            return None
        count, data = taken
        if self.stats is not None:
            self.stats.fast_launches(self.label, count)
        return {"op": "launches", "count": count, "seq": next(self._seq)}, [data]

    def start_call(self, header: dict, frames=()) -> Pending:
        """Send a request whose reply will be waited for with `finish_call`."""
        pending = Pending()
        self._post_awaiting(header, frames, pending)
        return pending

    def post_with_callback(self, header: dict, frames, callback) -> None:
        """Send without waiting; the reply goes to `callback(header, frames,
        error)` in the thread that receives it (see `ReplyCallback`)."""
        self._post_awaiting(header, frames, ReplyCallback(callback))

    def _post_awaiting(self, header: dict, frames, receiver) -> None:
        if self._failure:
            raise self._failed_call(header["op"])
        self._enqueue((header, frames), receiver)

    def add_gate(self, gate: Gate) -> None:
        """Hold back what is posted from now on until `gate.open()`."""
        gate._channel = self
        self._enqueue(gate)

    def wake(self) -> None:
        try:
            os.eventfd_write(self._wake_fd, 1)
        except OSError:
            pass  # closed: the channel is gone

    def finish_call(self, pending: Pending, op: str) -> tuple[dict, list]:
        while not pending.wait(WAIT_SLICE):
            self._check_server_alive(op)
        if pending.error:
            raise self._failed_call(op) if pending.error is self._failure else pending.error
        return pending.header, pending.frames

    def call(self, header: dict, frames=()) -> tuple[dict, list]:
        """Send a request and wait for its reply: (header, payload frames).

        When the socket is free, the caller sends and receives itself (two
        fewer thread wake-ups per call); otherwise the forwarding thread
        does, as for `start_call`."""
        op = header["op"]
        if self._failure:
            raise self._failed_call(op)
        if _payload_bytes(frames) <= LANE_MAX_PAYLOAD:
            answered = self.call_streamed(header, frames)
            if answered is not None:
                return answered
        if not self._take_socket():
            return self.finish_call(self.start_call(header, frames), op)
        pending = Pending()
        try:
            with self._post_lock:
                self._share.set_open(False)  # a reply is awaited on the socket
                self._seal_batch()
                # Only when no other reply is awaited: a train of copy replies
                # is the forwarding thread's to receive (taking turns on the
                # socket and the GIL with it would cost more than a hand-off).
                direct = not self._socket_awaits_or_gated()
                self._register(header, pending)
                if direct:
                    self._send_outbox()
                    self._send(header, frames)
                else:  # the forwarding thread's: queue it like any other call
                    self._outbox.append((header, frames))
            if direct:
                self._await_directly(pending)
                if self._pending or self.on_notice is not None:
                    # Somebody else awaits a reply: leave none unread, so that
                    # the socket's fd signals the next one to the forwarding thread.
                    self._receive_replies()
            with self._post_lock:
                self._publish_open()
        except zmq.ZMQError as exc:
            self._socket_failed(exc)
        finally:
            self._socket_lock.release()
        if self._pending:
            # Replies still to come (ours, if queued or the window ran out, or
            # other threads'): the forwarding thread must watch the socket.
            self.wake()
        return self.finish_call(pending, op)

    def call_streamed(self, header: dict, frames=(), into=None) -> tuple[dict, list] | None:
        """A synchronous call on the lane, whatever its payload's size (only
        a copy's may be large): the payload goes out from where it is, and
        a reply's payload of exactly len(into) bytes lands in `into`
        (writable bytes; the frames returned are then empty).  None when the
        lane is not free: the caller takes the socket."""
        if self._failure:
            raise self._failed_call(header["op"])
        if self._lane is None or not self._take_lane():
            return None
        try:
            return self._call_on_lane(header, frames, into)
        finally:
            self._lane_lock.release()

    def _socket_awaits_or_gated(self) -> bool:
        """Whether replies are awaited on the socket or a gate holds the
        outbox (under _post_lock): then a synchronous call must not jump
        ahead of them, on the lane or by waiting on the socket itself."""
        return bool(self._pending) or any(type(item) is Gate for item in self._outbox)

    def _publish_open(self) -> None:
        """Tell C whether it may make synchronous calls on the lane now
        (under _socket_lock and _post_lock, so nothing is being sent): when
        nothing is queued or awaited on the socket, as `_call_on_lane` asks."""
        if (self._lane is not None and not self._outbox and not self._pending and self._failure is None
                and not self._closing):
            self._share.set_open(True)

    def _take_lane(self) -> bool:
        """The lane lock, unless another call holds it (then the socket is
        the way): a post of launches holds it only a moment, worth waiting."""
        if self._lane_lock.acquire(blocking=False):
            return True
        return self._lane_posting and self._lane_lock.acquire(timeout=LANE_POST_WAIT)

    # ---------------------------------------------------------- the lane

    def _open_lane(self, address: tuple[str, int], hello: dict) -> Lane | None:
        """Connect the lane and prove it is this session's; None (calls take
        the ZeroMQ socket) if that fails."""
        host, port = address
        try:
            # An ASCII host as bytes: getaddrinfo() would otherwise load the
            # IDNA codec first, 2 ms of every program's start-up.
            sock = pysocket.create_connection((host.encode() if host.isascii() else host, port),
                                              timeout=self.timeout)
        except OSError as exc:
            log.info("%s: no lane to %s:%s (synchronous calls take the ZeroMQ socket): %s",
                     self.label, *address, exc)
            return None
        lane = Lane(sock)
        try:
            lane.send(dict(hello, op="lane", seq=0))
            reply, _ = lane.receive()
        except (OSError, ProtocolError) as exc:
            log.info("%s: the lane to %s:%s did not answer (synchronous calls take the ZeroMQ socket): %s",
                     self.label, *address, exc)
            lane.close()
            return None
        if reply.get("err"):
            log.warning("%s: lane refused by the server: %s", self.label, reply.get("msg"))
            lane.close()
            return None
        set_timeouts(sock, WAIT_SLICE, self.timeout)  # a wait comes back every WAIT_SLICE to check liveness
        return lane

    def _call_on_lane(self, header: dict, frames, into=None) -> tuple[dict, list] | None:
        """A synchronous call on the lane (under _lane_lock), or None if it
        must take the socket: replies are awaited there, or a gate holds
        the outbox.  What is queued goes out on the socket first; the
        launches C recorded just before the call go on the lane with it, in
        the same write (no thread hand-off: programs launch, then copy)."""
        op = header["op"]
        lane = self._lane
        if lane is None:  # dropped by a call that failed just now
            return None
        with self._socket_lock:
            if self._socket.closed:
                return None
            # Under _post_lock until the lane messages are counted: what another
            # thread posts meanwhile comes after the launches taken here, so
            # it must not go out first, nor without counting them.
            with self._post_lock:
                if self._socket_awaits_or_gated():
                    return None
                launches = self._take_batch()
                if launches is not None and (_payload_bytes(launches[1]) > LANE_MAX_PAYLOAD):
                    self._outbox.append(launches)  # a long train of launches: the socket pipelines it
                    launches = None
                header["seq"] = next(self._seq)
                try:
                    self._send_outbox()
                except zmq.ZMQError as exc:
                    self._socket_failed(exc)
                    raise self._failed_call(op) from None
                header["after"] = self._share.lane_messages(1 if launches is None else 2)
                if launches is not None:
                    launches[0]["after"] = header["after"]
                self._publish_open()
            if self.on_notice is not None:
                self._receive_replies()  # sending may have taken the fd's signal of a notice
            if self.stats is not None:
                self.stats.on_lane(self.label, 1 if launches is None else 2)
        try:
            if launches is not None:
                lane.send_all([launches, (header, frames)])
            else:
                lane.send(header, frames)
            reply, payload = self._await_lane(lane, op, into)
        except (OSError, ProtocolError) as exc:  # the request may or may not have been served: no retry
            self._drop_lane()
            if not self._failure:
                self.fail(TransportError(f"lane of {self.label} broke: {exc}"))
            raise self._failed_call(op) from None
        except BaseException:  # a timeout, the server lost: the reply would come out of step
            self._drop_lane()
            raise
        if reply.get("seq") != header["seq"]:
            self._drop_lane()
            self.fail(TransportError(f"lane of {self.label}: reply to {reply.get('seq')!r}, "
                                     f"expected {header['seq']}"))
            raise self._failed_call(op)
        self.lane_calls += 1
        return reply, payload

    def _await_lane(self, lane: Lane, op: str, into=None) -> tuple[dict, list]:
        sent = time.perf_counter()
        lane.wait_readable(self._lane_spin.window(op))
        while True:
            try:
                head, lengths = lane.receive_head()
                break
            except (BlockingIOError, TimeoutError):  # SO_RCVTIMEO: a WAIT_SLICE without the reply
                pass
            self._check_server_alive(op)
        self._lane_spin.waited(op, time.perf_counter() - sent)
        reply = protocol.unpack(head)
        if not lengths:  # most replies: the header is all
            return reply, []

        def still_coming():
            self._check_server_alive(op)

        if into is not None and len(lengths) == 1 and lengths[0] == memoryview(into).nbytes:
            lane.read_into(into, still_coming)
            return reply, []
        return reply, lane.read_frames(lengths, still_coming)

    def _check_server_alive(self, op: str) -> None:
        """Between slices of a wait for `op`'s reply: fail if the device
        failed, or if the server has been silent for longer than `timeout`."""
        if self._failure:
            raise self._failed_call(op)
        silent_for = time.monotonic() - self._liveness()
        if silent_for > self.timeout:
            raise ServerTimeout(f"{op} on {self.label}: no reply and no heartbeat for "
                                f"{silent_for:.1f}s (RCUDA_TIMEOUT={self.timeout:g}s)")

    def _drop_lane(self) -> None:
        """(Under _lane_lock.)"""
        lane, self._lane = self._lane, None
        if lane is not None:
            self._share.set_open(False)
            self._share.attach(-1, 0)
            lane.close()

    # C's synchronous calls on the lane (native/sync_fast_path.c) come here
    # for what they leave to Python.

    def check_alive(self, call: str) -> bool:
        """Whether the server still answers, for C waiting for `call`'s reply."""
        try:
            self._check_server_alive(call)
        except TransportError:
            return False
        return True

    def lane_failed(self, call: str, failure: int, error_number: int = 0) -> None:
        """C's `call` on the lane failed; the lane is out of step, so it goes
        (C has stopped using it).  Raises what the Python lane call raises."""
        with self._lane_lock:
            self._drop_lane()
        if failure == LANE_SERVER_SILENT:  # as on the Python lane: the device may go on, on the socket
            self._check_server_alive(call)
            raise ServerTimeout(f"{call} on {self.label}: no reply and no heartbeat for over "
                                f"{self.timeout:g}s (RCUDA_TIMEOUT)")
        reason = LANE_FAILURES.get(failure, f"failure {failure}")
        if error_number:
            reason += f": {os.strerror(error_number)}"
        if not self._failure:
            self.fail(TransportError(f"lane of {self.label} broke: {reason}"))
        raise self._failed_call(call)

    @property
    def has_lane(self) -> bool:
        return self._lane is not None

    @contextlib.contextmanager
    def lane_on_loan(self):
        """The lane's connection, lent to another process for a while (the
        latency benchmark's C loop: how fast a client in C could be against
        this server).  Yields a `LaneLoan` holding the descriptor and the
        `after` its requests must carry; the borrower sets its `sent` to the
        messages it sent, and must have read every reply when it gives the
        lane back.  No call takes the lane meanwhile."""
        with self._lane_lock:
            lane = self._lane
            if lane is None or lane.buffered:
                raise TransportError(f"{self.label} has no lane to lend")
            with self._socket_lock, self._post_lock:
                if self._socket_awaits_or_gated():
                    raise TransportError(f"{self.label}: replies are awaited on the socket, or a gate holds it")
                self._seal_batch()
                self._send_outbox()  # what was posted before goes first, on the socket
                loan = LaneLoan(lane.fileno(), self._share.lane_messages(0))
                try:
                    yield loan
                except BaseException:
                    self._drop_lane()  # replies may be left unread: the lane is out of step
                    raise
                finally:
                    self._share.lane_messages(loan.sent)  # later socket messages come after them

    # ---------------------------------------------------------- the socket

    def _socket_failed(self, exc: zmq.ZMQError) -> None:
        """As in the forwarding thread: the device is unusable, not the program."""
        log.exception("socket of %s failed", self.label)
        self.fail(TransportError(f"socket of {self.label} failed: {exc}"))

    def _take_socket(self) -> bool:
        """The socket lock, if nobody holds it and the channel is not closing."""
        if not self._socket_lock.acquire(blocking=False):
            return False
        if self._socket.closed:
            self._socket_lock.release()
            return False
        return True

    def _await_directly(self, pending: Pending) -> None:
        """Receive on the socket until `pending` is answered or the window is
        over (under _socket_lock).  A blocking recv, as a bare ZeroMQ client
        makes: no poller, no extra system calls.  What other threads posted
        meanwhile is sent after each message received; their wake-up of the
        forwarding thread waits for the socket lock."""
        socket = self._socket
        deadline = time.monotonic() + DIRECT_WINDOW_MS / 1000
        while not pending.resolved and self._failure is None:
            try:
                parts = socket.recv_multipart(copy=False)  # RCVTIMEO = DIRECT_WINDOW_MS
            except zmq.Again:
                return
            self._dispatch(parts)
            if self._outbox:
                with self._post_lock:
                    self._seal_batch()
                self._send_outbox()
            if time.monotonic() > deadline:
                return

    def fail(self, error: TransportError) -> None:
        """The server is gone: fail every waiting and future call."""
        if self._failure is None:
            self._failure = error
        self._share.set_open(False)
        for seq in list(self._pending):
            pending = self._pending.pop(seq, None)
            if pending:
                pending.resolve(error=error)

    def close(self) -> None:
        self._closing = True
        self._share.set_open(False)
        # wake(), which tolerates a closed eventfd: one CI run found it closed
        # here after every call had succeeded (cause unknown, not reproduced).
        self.wake()
        self._thread.join(timeout=self.timeout)
        with self._lane_lock:
            self._drop_lane()

    def _failed_call(self, op: str) -> TransportError:
        """The failure, naming the call and this device (other devices,
        on other servers, keep working)."""
        return type(self._failure)(f"{op} on {self.label}: {self._failure}")

    @property
    def failed(self) -> bool:
        return self._failure is not None

    # ---------------------------------------------------------- the thread

    def _run(self) -> None:
        # The socket's descriptor, not the socket: polling it only reads
        # whether it signalled, so a caller may use the socket meanwhile.
        # It is watched only while a reply is awaited by somebody else than
        # a caller on its direct path (or notices may come): a wake-up per
        # direct call would cost as much as the hand-off it saves.
        watch_socket, wake_only = zmq.Poller(), zmq.Poller()
        watch_socket.register(self._socket.getsockopt(zmq.FD), zmq.POLLIN)
        for poller in (watch_socket, wake_only):
            poller.register(self._wake_fd, zmq.POLLIN)
        try:
            while not self._closing:
                expecting = self._pending or self.on_notice is not None
                (watch_socket if expecting else wake_only).poll()
                self._drain_wake_fd()
                with self._socket_lock:
                    with self._post_lock:
                        self._seal_batch()
                    self._send_outbox()
                    # Always, not only when the fd signalled: sending may have
                    # consumed the signal of a reply that arrived meanwhile.
                    self._receive_replies()
                    with self._post_lock:
                        self._publish_open()
            with self._socket_lock:
                self._send_outbox()
        except Exception as exc:  # a bug here must not hang the application
            log.exception("forwarding thread of %s stopped", self.label)
            self.fail(TransportError(f"forwarding thread of {self.label} stopped: {exc}"))
        finally:
            with self._socket_lock:
                self._socket.close(linger=0)
                os.close(self._wake_fd)

    def _drain_wake_fd(self) -> None:
        try:
            os.eventfd_read(self._wake_fd)
        except BlockingIOError:
            pass

    def _send_outbox(self) -> None:
        """Send what is queued, in order, up to a closed gate (under _socket_lock).
        Launches take the lane when it is free: it reaches the server's GPU
        thread without ZeroMQ's I/O threads, and they need no reply."""
        outbox = self._outbox
        while outbox:
            item = outbox[0]
            if type(item) is Gate:
                if not item.opened:
                    return  # the gate's opening wakes us again
                outbox.popleft()
                continue
            header, frames = outbox.popleft()
            if header["op"] == "launches" and self._post_on_lane(header, frames):
                continue
            self._send(header, frames)

    def _post_on_lane(self, header: dict, frames) -> bool:
        """Send a message that gets no reply on the lane, after everything
        sent on the socket so far (under _socket_lock); False if the lane is
        busy, absent or the message too large: then it takes the socket."""
        if self._lane is None or _payload_bytes(frames) > LANE_MAX_PAYLOAD:
            return False
        if not self._lane_lock.acquire(blocking=False):
            return False
        self._lane_posting = True
        try:
            lane = self._lane
            if lane is None:
                return False
            # Both counts hold still meanwhile: the socket's moves under
            # _socket_lock, the lane's under the lane's lock; both are ours.
            header["after"] = self._share.lane_messages(0)
            try:
                if not lane.try_send(header, frames):
                    del header["after"]
                    return False  # the server is not reading now: the socket queues without limit
            except OSError as exc:  # it may or may not have arrived: the device cannot go on
                self._drop_lane()
                self.fail(TransportError(f"lane of {self.label} broke: {exc}"))
            self._share.lane_messages(1)
            if self.stats is not None:
                self.stats.on_lane(self.label, 1)
            return True
        finally:
            self._lane_posting = False
            self._lane_lock.release()

    def _send(self, header: dict, frames) -> None:
        lane_after = self._share.socket_message()
        if lane_after:
            header["lane_after"] = lane_after  # served after the lane's messages before it
        if frames:
            self._socket.send(protocol.pack(header), zmq.SNDMORE)
            self._socket.send_multipart(frames, copy=False)
        else:
            self._socket.send(protocol.pack(header))

    def _receive_replies(self) -> None:
        """Dispatch every reply that has arrived (under _socket_lock)."""
        socket = self._socket
        # ZMQ_EVENTS, not recv until zmq.Again: the exception cost ~4 us a reply.
        while socket.getsockopt(ZMQ_EVENTS) & ZMQ_POLLIN:
            self._dispatch(socket.recv_multipart(copy=False))

    def _dispatch(self, parts: list) -> None:
        """Hand one reply to whoever awaits it."""
        try:
            header = protocol.unpack(parts[0].buffer)
            seq = header.get("seq")
        except ProtocolError as exc:
            log.error("%s sent an unreadable reply: %s", self.label, exc)
            return
        if seq is None and header.get("notice"):
            self._notice(header)
            return
        pending = self._pending.pop(seq, None)
        if pending is None:
            log.warning("%s: reply to unknown request %r ignored", self.label, seq)
            return
        pending.resolve(header, parts[1:])

    def _notice(self, header: dict) -> None:
        if self.on_notice is None:
            log.warning("%s: unhandled notice %r", self.label, header.get("notice"))
            return
        try:
            self.on_notice(header)
        except Exception:  # noqa: BLE001 - a handler's bug must not stop the forwarding thread
            log.exception("%s: handling notice %r failed", self.label, header.get("notice"))


def _payload_bytes(frames) -> int:
    total = 0
    for frame in frames:
        view = getattr(frame, "buffer", frame)
        total += view.nbytes if isinstance(view, memoryview) else len(view)
    return total
