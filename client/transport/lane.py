"""`LaneLink`: a device's link on its lane, a TCP connection that the
interposer's C side owns (native/link.c); see client/transport/link.py for what a
link offers.

Python connects the lane and proves it is the session's (rcuda/lane.py's
framing; on a --auth server's sealed lane, after the handshake that makes
its keys, rcuda/sealed.py), then hands the connection (and the keys) to C
and from then on calls into C with the GIL released: a call sends and reads its own reply as C's reader; a post
returns once its bytes are written (or queued behind a gate).  The link's
service thread here parks in C (`rcuda_link_service`), where it ships the
launches C recorded and reads replies nobody waits for; it comes back to
Python only to hand a reply to its callback.
"""
from __future__ import annotations

import itertools
import logging
import os
import socket as pysocket
import threading
import time

from rcuda import protocol
from rcuda.errors import ProtocolError, TransportError
from rcuda.lane import LaneFrame, dial

from .link import Gate, Link, failed_call, server_silent

log = logging.getLogger(__name__)

#: How a link failed (native/link.c, enum link_failure).
FAILURES = {1: "cannot send or receive", 2: "closed by the server", 3: "malformed message", 4: "server silent",
            5: "closed", 6: "out of memory",
            7: "a sealed record failed its check (altered, replayed or reordered on the way)"}
SERVER_SILENT, SHUT, BAD_MESSAGE = 4, 5, 3

#: How long the service thread stays in C before it looks at Python's side.
SERVICE_SLICE_MS = 500


def connect_lane(address: tuple[str, int], hello: dict, label: str, timeout: float,
                 secret: bytes | None = None):
    """(a lane connection that the server accepted as this session's, its
    rcuda.sealed.Seal or None), or None: the device then uses its ZeroMQ
    socket.  `secret`: the session's lane secret, where the server seals
    its lanes (--auth)."""
    host, port = address
    try:
        lane = dial(host, port, timeout, secret)
    except OSError as exc:
        log.info("%s: no lane to %s:%s (the device takes its ZeroMQ socket): %s", label, host, port, exc)
        return None
    try:
        lane.send(dict(hello, op="lane", seq=0))
        reply, _ = lane.receive()
        if lane.buffered:
            raise ProtocolError("bytes after the lane's hello reply")
    except (OSError, ProtocolError) as exc:
        log.info("%s: the lane to %s:%s did not answer (the device takes its ZeroMQ socket): %s",
                 label, host, port, exc)
        lane.close()
        return None
    if reply.get("err"):
        log.warning("%s: lane refused by the server: %s", label, reply.get("msg"))
        lane.close()
        return None
    return lane.sock, lane.seal


class LaneLink(Link):
    def __init__(self, native, sock: pysocket.socket, label: str, timeout: float, batch_device: int = -1,
                 spin_us: float = 300.0, seal=None):
        """`batch_device`: the device whose launches C records (its batches
        go out first on this link); -1 outside the interposer.  `seal`: a
        sealed lane's rcuda.sealed.Seal after its hello, whose keys and
        record numbers C carries on with."""
        super().__init__()
        self._ffi, self._lib = native
        self.label = label
        self.timeout = timeout
        self.stats = None  # client/stats.py Stats, with RCUDA_STATS=1
        alive_until = time.monotonic_ns() + int(timeout * 1e9)
        handle = self._lib.rcuda_link_open(sock.fileno(), batch_device, int(spin_us * 1000), alive_until)
        if handle < 0:
            raise TransportError(f"{label}: no free link (too many devices open in this process)")
        sock.detach()  # the connection is C's now
        if seal is not None and self._lib.rcuda_link_seal(handle, seal.send.key, seal.send.number,
                                                          seal.receive.key, seal.receive.number):
            self._lib.rcuda_link_release(handle)  # and the connection with it
            raise TransportError(f"{label}: cannot seal the lane: OpenSSL's libcrypto (libcrypto.so.3) "
                                 f"did not load or failed")
        self.handle = handle
        self.wake_fd = self._lib.rcuda_link_wake_fd(handle)
        self._seq = itertools.count(1)
        self._awaited: dict[int, object] = {}  # seq -> callback(reply, frames, error)
        self._on_notice = None
        self._closed_counts: tuple[int, int] | None = None  # (calls in C, records shipped) once closed
        self._thread = threading.Thread(target=self._serve, name=f"rcuda {label}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------- calls

    def call(self, header: dict, frames=(), into=None) -> tuple[dict, list]:
        op = header["op"]
        if self._failure:
            raise failed_call(self._failure, op, self.label)
        header["seq"] = seq = next(self._seq)
        parts, count, keep = self._parts(header, frames, borrowed=True)  # the caller waits: its frames stay
        target, size = self._target(into)
        reply = self._ffi.new("struct link_reply *")
        failure = self._lib.rcuda_link_call(self.handle, seq, op.encode(), parts, count, target, size, reply)
        del keep
        if failure:
            self._lib.rcuda_link_free(reply)
            raise self._failed(op, failure, reply.error_number)
        return self._received(reply)

    def post(self, header: dict, frames=(), borrowed: bool = False) -> None:
        op = header["op"]
        if self._failure:
            raise failed_call(self._failure, op, self.label)
        header["seq"] = next(self._seq)
        parts, count, keep = self._parts(header, frames, borrowed)
        failure = self._lib.rcuda_link_post(self.handle, parts, count)
        del keep
        if failure:
            raise self._failed(op, failure, self._error_number())

    def post_awaited(self, header: dict, frames, callback, into=None) -> None:
        op = header["op"]
        if self._failure:
            raise failed_call(self._failure, op, self.label)
        header["seq"] = seq = next(self._seq)
        self._awaited[seq] = callback
        parts, count, keep = self._parts(header, frames, borrowed=False)
        target, size = self._target(into)
        failure = self._lib.rcuda_link_post_awaited(self.handle, seq, parts, count, target, size)
        del keep
        if failure:
            self._awaited.pop(seq, None)
            raise self._failed(op, failure, self._error_number())

    def add_gate(self, gate: Gate) -> None:
        gate_id = self._lib.rcuda_link_gate(self.handle)
        if not gate_id:
            raise self._failed("cudaLaunchHostFunc", self._lib_failure(), self._error_number())
        if not gate.attach(self, gate_id):
            self.gate_opened(gate)

    def gate_opened(self, gate: Gate) -> None:
        self._lib.rcuda_link_open_gate(self.handle, gate.id)

    def _parts(self, header: dict, frames, borrowed: bool):
        """The message for C: struct link_part[] (header first), its length,
        and the cdata that must live until C returns."""
        ffi = self._ffi
        views = [protocol.pack(header), *(getattr(f, "buffer", f) for f in frames)]
        parts = ffi.new("struct link_part[]", len(views))
        keep = []
        for i, view in enumerate(views):
            data = ffi.from_buffer(view)
            keep.append(data)
            parts[i].data = data
            parts[i].size = len(data)
            parts[i].borrowed = int(borrowed and i > 0)
        return parts, len(views), keep

    def _target(self, into):
        if into is None:
            return self._ffi.NULL, 0
        target = self._ffi.from_buffer(into, require_writable=True)
        return target, len(target)

    def _received(self, reply) -> tuple[dict, list]:
        """A reply's header and payload frames (views of C's buffer, freed
        when the last view goes); none when they landed in `into`."""
        ffi, lib = self._ffi, self._lib
        try:
            header = protocol.unpack(ffi.buffer(reply.header, reply.header_size))
            frames = []
            if reply.payload != ffi.NULL:
                owner = ffi.gc(reply.payload, lib.rcuda_link_free_payload)
                reply.payload = ffi.NULL
                view = memoryview(ffi.buffer(owner, reply.payload_size))
                offset = 0
                for i in range(reply.frame_count):
                    size = reply.frame_sizes[i]
                    frames.append(LaneFrame(view[offset:offset + size]))
                    offset += size
            elif not reply.landed:
                frames = [LaneFrame(memoryview(b"")) for _ in range(reply.frame_count)]
        finally:
            lib.rcuda_link_free(reply)
        return header, frames

    # ---------------------------------------------------------- failures

    def _error_number(self) -> int:
        number = self._ffi.new("int *")
        self._lib.rcuda_link_failure(self.handle, number)
        return number[0]

    def _lib_failure(self) -> int:
        return self._lib.rcuda_link_failure(self.handle, self._ffi.new("int *"))

    def _failed(self, op: str, failure: int, error_number: int) -> TransportError:
        """The error for a call that found the link failed: the link's first
        failure, recorded here (the device cannot go on)."""
        if self._failure is None:
            if failure == SERVER_SILENT:
                error = server_silent(self.timeout)
            elif failure == SHUT:
                error = TransportError("the device is closed")
            else:
                reason = FAILURES.get(failure, f"failure {failure}")
                if error_number:
                    reason += f": {os.strerror(error_number)}"
                error = TransportError(f"its link broke: {reason}")
            self.fail(error)
        return failed_call(self._failure, op, self.label)

    def failed_in_c(self, call: str, failure: int, error_number: int) -> TransportError:
        """A call C made on this link failed (native/sync_fast_path.c)."""
        return self._failed(call, failure, error_number)

    def _release_waiters(self, error: TransportError) -> None:
        self._lib.rcuda_link_alive_until(self.handle, 0)  # what waits in C gives up at once

    def heard(self, when: float) -> None:
        """The session's heartbeat heard the server at monotonic time `when`."""
        if self._failure is None:
            self._lib.rcuda_link_alive_until(self.handle, int((when + self.timeout) * 1e9))

    @property
    def on_notice(self):
        return self._on_notice

    @on_notice.setter
    def on_notice(self, handler) -> None:
        """callable(header) for unsolicited server messages ({seq: null, notice: ...})."""
        self._on_notice = handler
        self._lib.rcuda_link_watch_notices(self.handle, int(handler is not None))

    def calls_in_c(self) -> int:
        if self._closed_counts is not None:
            return self._closed_counts[0]
        return self._lib.rcuda_link_calls_in_c(self.handle)

    def records_shipped(self) -> int:
        """Launches (and memsets, copies) C recorded and this link sent."""
        if self._closed_counts is not None:
            return self._closed_counts[1]
        return self._lib.rcuda_link_records_shipped(self.handle)

    def spin_window(self, op: str) -> float:
        """Seconds a call of `op` busy-polls for its reply now (learnt per op)."""
        return self._lib.rcuda_link_spin_window(self.handle, op.encode()) / 1e9

    # ---------------------------------------------------------- the service thread

    def _serve(self) -> None:
        delivery = self._ffi.new("struct link_reply *")
        try:
            while True:
                got = self._lib.rcuda_link_service(self.handle, SERVICE_SLICE_MS, delivery)
                if got < 0:
                    return
                if got:
                    self._deliver(delivery)
        except Exception as exc:  # a bug here must not hang the application
            log.exception("service thread of %s stopped", self.label)
            self.fail(TransportError(f"its service thread stopped: {exc}"))

    def _deliver(self, delivery) -> None:
        seq, solicited, failure = delivery.seq, delivery.solicited, delivery.failure
        if failure:
            error_number = delivery.error_number
            self._lib.rcuda_link_free(delivery)
            callback = self._awaited.pop(seq, None)
            if callback is not None:
                self._run(callback, None, [], self._failed("reply", failure, error_number))
            return
        header, frames = self._received(delivery)
        if not solicited:
            if header.get("seq") is None and header.get("notice"):
                self._hand_notice(header)
            else:
                log.warning("%s: reply to unknown request %r ignored", self.label, header.get("seq"))
            return
        callback = self._awaited.pop(seq, None)
        if callback is None:
            log.warning("%s: reply to unknown request %r ignored", self.label, seq)
            return
        self._run(callback, header, frames, None)

    def _run(self, callback, header, frames, error) -> None:
        try:
            callback(header, frames, error)
        except Exception:  # noqa: BLE001 - never let a callback stop the service thread
            log.exception("%s: reply callback failed", self.label)

    def close(self) -> None:
        self._closed_counts = (self.calls_in_c(), self.records_shipped())
        self._lib.rcuda_link_close(self.handle)
        self._thread.join(timeout=self.timeout)
        if not self._thread.is_alive():
            self._lib.rcuda_link_release(self.handle)
