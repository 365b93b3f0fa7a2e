"""The lane: a plain TCP connection that carries one device's traffic,
framed as below (rcuda/wire.py has the layout and limits).

A round trip through ZeroMQ crosses four threads (the caller, ZeroMQ's I/O
thread on each side, the server's GPU thread); on a small machine each
hand-off costs tens of microseconds.  On a lane, the client's calling thread
sends its request and reads its reply itself (native/link.c owns the
client's side), and the server's GPU thread reads and answers, with no
thread in between.

On a server run with --auth the lane's bytes travel sealed, in records of
authenticated encryption (rcuda/sealed.py; a Lane given a `seal`); a
connection proves it belongs to the session with the session's token,
sealed or not.

Framing: a message is the same multipart as on the ZeroMQ socket, header
and payload frames:

    u32 header length, u32 number of payload frames,
    u64 length of each payload frame,
    header bytes (msgpack), payload bytes.

This module is the server's side (and the fuzzer's and the tests'); the
client's is C.
"""
from __future__ import annotations

import os
import select
import socket
import struct
import time

from rcuda import protocol
from rcuda.errors import LaneClosed, ProtocolError
from rcuda.wire import FRAME_LENGTH, MAX_FRAMES, MAX_HEADER, PREFIX, SPIN_SHRINK_BELOW

#: First read of a message: most replies and requests fit.
FIRST_READ = 4096
# Plain ints: socket's flags are enum.IntFlag members, and combining or
# testing them costs about a microsecond a time on a lane's every message.
MSG_PEEK_NOWAIT = int(socket.MSG_PEEK | socket.MSG_DONTWAIT)
SEND_FLAGS = int(socket.MSG_NOSIGNAL)
SEND_FLAGS_NOWAIT = int(socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT)


def set_timeouts(sock: socket.socket, receive_seconds: float, send_seconds: float) -> None:
    """Blocking, with timeouts kept by the kernel (SO_RCVTIMEO, SO_SNDTIMEO):
    Python's own socket timeouts poll() before every read and write, a
    system call more each time and, worse, a sleep where Lane.wait_readable
    means to spin.  A timed-out read raises BlockingIOError."""
    sock.settimeout(None)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(receive_seconds))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(send_seconds))


def listen(bind_host: str, backlog: int = 4) -> socket.socket:
    """A TCP listener on a free port of the ZeroMQ bind host's interface
    ("*": all of them).  OSError if there cannot be one."""
    host = bind_host.strip("[]")
    host = "" if host == "*" else host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, 0), family=family, backlog=backlog)


def dial(host: str, port: int, timeout: float, secret: bytes | None = None,
         max_payload: int | None = None) -> "Lane":
    """A lane to host:port, sealed with keys made from `secret`
    (rcuda/sealed.py) when one is given; every wait bounded by `timeout`
    (the kernel's timeouts, set_timeouts).  OSError if it cannot be made."""
    # An ASCII host as bytes: getaddrinfo() would otherwise load the IDNA
    # codec first, 2 ms of a program's start-up.
    sock = socket.create_connection((host.encode() if host.isascii() else host, port), timeout=timeout)
    try:
        set_timeouts(sock, timeout, timeout)
        seal = None
        if secret is not None:
            from rcuda import sealed  # only for --auth servers: `cryptography` is 20 ms of start-up
            seal = sealed.client_handshake(sock, secret)
        return Lane(sock, max_payload=max_payload, seal=seal)
    except BaseException:
        sock.close()
        raise


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, int((seconds - whole) * 1e6))


class SpinPolicy:
    """How long to busy-poll for the other side before sleeping, learnt per
    kind of wait (a client keys its waits by the call, a server by the
    message it served last).

    Spinning pays when the answer comes within the window: no wake-up, which
    costs tens of microseconds on some machines.  When it comes later, the
    window was burnt for nothing, and on a busy machine (several GPUs' calls
    and servers on few cores) it takes the CPU from those doing work.  So,
    as the kernel's haltpoll governor does: a wait that ended within
    `max_seconds` sets its kind's window to the whole of it; one that
    outlasted it halves the window, down to none.  A program's waits of one
    kind usually look alike (a copy after kernels waits for the kernels; a
    query is answered at once), and a kind that changes is relearnt at its
    first short wait."""


    def __init__(self, max_seconds: float):
        self.max_seconds = max(max_seconds, 0.0)
        self._windows: dict = {}

    def window(self, kind) -> float:
        """Seconds to spin before sleeping, for a wait of this kind."""
        return self._windows.get(kind, self.max_seconds)

    def waited(self, kind, seconds: float) -> None:
        """A wait of this kind took `seconds` until the other side answered."""
        if seconds <= self.max_seconds:
            self._windows[kind] = self.max_seconds
        else:
            halved = self.window(kind) / 2
            self._windows[kind] = halved if halved >= self.max_seconds / SPIN_SHRINK_BELOW else 0.0


class LaneFrame:
    """A payload frame read from a lane: like a zmq.Frame, it has `.buffer`."""

    __slots__ = ("buffer",)

    def __init__(self, buffer: memoryview):
        self.buffer = buffer

    def __len__(self) -> int:
        return len(self.buffer)


class UnreadFrame:
    """A payload frame still in the lane, `len()` bytes long: whoever serves
    the request reads it where it belongs (`read_into`), a piece at a time
    if it likes; what nobody read is dropped afterwards (`drop_rest`)."""

    __slots__ = ("lane", "size", "left", "on_idle")

    def __init__(self, lane: "Lane", size: int, on_idle):
        self.lane, self.size, self.left, self.on_idle = lane, size, size, on_idle

    def __len__(self) -> int:
        return self.size

    def read_into(self, target) -> None:
        """The next len(target) bytes of the frame."""
        count = memoryview(target).nbytes
        if count > self.left:
            raise ValueError(f"{count} bytes asked of a frame with {self.left} left")
        self.lane.read_into(target, self.on_idle)
        self.left -= count

    def drop_rest(self) -> None:
        self.lane.skip(self.left, self.on_idle)
        self.left = 0


class Lane:
    """One side of a lane: whole messages in, whole messages out.

    Not thread-safe: one thread uses it at a time (the client holds a lock,
    the server uses it from the GPU thread only)."""

    def __init__(self, sock: socket.socket, max_payload: int | None = None, seal=None):
        """`seal`: a sealed lane's rcuda.sealed.Seal (None: plain bytes)."""
        self.sock = sock
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.max_payload = max_payload  # None: trust the other side (a client reading its server)
        self.seal = seal
        self._left = b""  # bytes read past the end of the last message
        self._peek = bytearray(1)

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def send(self, header: dict, frames=()) -> None:
        """One message, in one system call when the kernel takes it all.
        Frames go out from where they are (a copy's payload is never copied
        here), however large."""
        self.send_all([(header, frames)])

    def send_all(self, messages) -> None:
        """Several messages [(header, frames), ...], one after the other, in
        one system call when the kernel takes them all."""
        self._send_parts([part for header, frames in messages for part in _parts(protocol.pack(header), frames)])

    def send_raw(self, head: bytes, frames=()) -> None:
        """`send` with the header already encoded (or not a header at all:
        the fuzzer's)."""
        self._send_parts(_parts(head, frames))

    def try_send(self, header: dict, frames=()) -> bool:
        """`send`, unless the connection cannot take any of it now (the other
        side has stopped reading for a while: a long kernel): then False and
        nothing sent.  A message it has begun is finished, waiting if need be."""
        return self._send_parts(_parts(protocol.pack(header), frames), wait_to_start=False)

    def _send_parts(self, parts: list, wait_to_start: bool = True) -> bool:
        if self.seal is not None:
            if not wait_to_start and not _writable_now(self.sock):
                return False
            for record in self.seal.records(parts):  # each sent before the next reuses its buffer
                self._send_plain([record], True)
            return True
        return self._send_plain(parts, wait_to_start)

    def _send_plain(self, parts: list, wait_to_start: bool) -> bool:
        parts = [memoryview(p) for p in parts if len(p)]
        # MSG_NOSIGNAL: a closed lane is an error here, not a SIGPIPE that kills the program.
        flags = SEND_FLAGS if wait_to_start else SEND_FLAGS_NOWAIT
        while parts:
            try:
                sent = self.sock.sendmsg(parts, (), flags)  # partial when the buffer filled up
            except BlockingIOError:
                if flags == SEND_FLAGS_NOWAIT:  # nothing of it went out
                    return False
                raise
            flags = SEND_FLAGS
            while parts and sent >= len(parts[0]):
                sent -= len(parts.pop(0))
            if sent:
                parts[0] = parts[0][sent:]
        return True

    def receive(self) -> tuple[dict, list[LaneFrame]]:
        """The next message: (header, payload frames); see `receive_raw`."""
        header, frames = self.receive_raw()
        return protocol.unpack(header), frames

    def wait_readable(self, spin_seconds: float, also=None) -> bool:
        """Busy-poll for up to `spin_seconds` until bytes are there to read
        (or `also()` is true); whether they are.

        Sleeping in recv and being woken costs a scheduler wake-up, which on
        some machines (virtual ones especially) is tens of microseconds when
        the other side runs on another CPU: more than the rest of a round
        trip.  A short spin catches a quick answer awake; sched_yield lets
        the other side run first when it shares our CPU."""
        deadline = time.perf_counter() + spin_seconds
        while True:
            if self.readable():
                return True
            if (also is not None and also()) or time.perf_counter() > deadline:
                return False
            os.sched_yield()

    @property
    def buffered(self) -> bool:
        """Whether bytes of the next message have been read already."""
        return bool(self._left) or (self.seal is not None and self.seal.buffered)

    @property
    def read_ahead(self) -> bytes:
        """The bytes read past the last message (what a reader other than
        this object, native/served_requests.c, must take first)."""
        return self._left

    def drop_read_ahead(self, count: int) -> None:
        """The first `count` bytes of `read_ahead` were taken by another reader."""
        self._left = self._left[count:]

    def readable(self) -> bool:
        """Whether a read would not block (bytes, or the end of the stream)."""
        if self.buffered:
            return True
        try:
            self.sock.recv_into(self._peek, 1, MSG_PEEK_NOWAIT)
            return True
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True  # broken: the read will say so

    def receive_raw(self) -> tuple[memoryview, list[LaneFrame]]:
        """The next message, its header undecoded.  Raises LaneClosed when
        the other side is gone, ProtocolError for a malformed message, and
        the socket's timeout (BlockingIOError, TimeoutError) when nothing
        more has come; then what was read is kept, and it may be called again."""
        data, lengths, lengths_end, header_size = self._read_head()
        payload = sum(lengths)
        if self.max_payload is not None and payload > self.max_payload:
            raise ProtocolError(f"lane message with {payload} payload bytes (at most {self.max_payload})")
        end = lengths_end + header_size + payload
        if len(data) < end:
            data = self._read_more(data, end)
        view = memoryview(data)
        self._left = bytes(view[end:]) if len(data) > end else b""
        return view[lengths_end:lengths_end + header_size], _frames_of(view, lengths_end + header_size, lengths)

    # A copy's payload is read where it belongs (device memory on a sim
    # server, the program's buffer on a client) instead of into a message
    # buffer first: receive_head, then read_into or skip.

    def receive_head(self) -> tuple[bytes, list[int]]:
        """The next message's header (undecoded) and the lengths of its
        payload frames, which are left to read.  Timeouts as receive_raw."""
        data, lengths, lengths_end, header_size = self._read_head()
        end = lengths_end + header_size
        if len(data) < end:
            data = self._read_more(data, end)
        self._left = bytes(data[end:])
        return bytes(data[lengths_end:end]), lengths

    def read_into(self, target, on_idle) -> None:
        """Fill `target` (writable bytes) from the stream.  `on_idle()` runs
        whenever a socket timeout passes without a byte; it raises to give up."""
        view = memoryview(target).cast("B")
        have = min(len(self._left), len(view))
        view[:have] = self._left[:have]
        self._left = self._left[have:]
        while have < len(view):
            try:
                have += self._recv_into(view[have:])
            except (BlockingIOError, TimeoutError):
                on_idle()

    def skip(self, count: int, on_idle) -> None:
        """Read and drop `count` bytes: a payload nobody wants (its request
        was refused) must still leave the stream, or the next message is lost."""
        scratch = bytearray(min(count, 1 << 20))
        while count:
            piece = min(count, len(scratch))
            self.read_into(memoryview(scratch)[:piece], on_idle)
            count -= piece

    def read_frames(self, lengths: list[int], on_idle) -> list[LaneFrame]:
        """Payload frames of these lengths, read into one new buffer."""
        buffer = memoryview(bytearray(sum(lengths)))
        self.read_into(buffer, on_idle)
        return _frames_of(buffer, 0, lengths)

    def _read_head(self):
        """The prefix and frame lengths of the next message: (bytes read so
        far, lengths, where the header starts, header size)."""
        data = self._left
        if len(data) < PREFIX.size:
            data = self._read_more(data, PREFIX.size)
        header_size, count = PREFIX.unpack_from(data)
        if header_size > MAX_HEADER or count > MAX_FRAMES:
            raise ProtocolError(f"lane message of {header_size} header bytes and {count} frames is too large")
        lengths_end = PREFIX.size + FRAME_LENGTH.size * count
        if len(data) < lengths_end:
            data = self._read_more(data, lengths_end)
        lengths = [FRAME_LENGTH.unpack_from(data, PREFIX.size + FRAME_LENGTH.size * i)[0] for i in range(count)]
        return data, lengths, lengths_end, header_size

    def _read_more(self, data, needed: int) -> bytearray:
        """`data` and what follows it on the socket, at least `needed` bytes
        in all.  What was read is kept (in `_left`) if the wait times out."""
        buffer = bytearray(max(needed, FIRST_READ))
        buffer[:len(data)] = data
        have = len(data)
        view = memoryview(buffer)
        try:
            while have < needed:
                have += self._recv_into(view[have:])
        except (BlockingIOError, TimeoutError, InterruptedError):
            self._left = bytes(view[:have])
            raise
        finally:
            view.release()
        del buffer[have:]
        return buffer

    def _recv_into(self, view: memoryview) -> int:
        """One read into `view`: how many bytes came.  The socket's timeouts
        pass through; an end or a break of the stream is LaneClosed (on a
        sealed lane, a record that fails its check too)."""
        if self.seal is not None:
            return self.seal.read_into(view, self._recv_plain)
        return self._recv_plain(view)

    def _recv_plain(self, view: memoryview) -> int:
        try:
            got = self.sock.recv_into(view)
        except (BlockingIOError, TimeoutError, InterruptedError):
            raise
        except OSError as exc:
            raise LaneClosed(f"the lane broke: {exc}") from None
        if got == 0:
            raise LaneClosed("the lane was closed by the other side")
        return got


def _writable_now(sock: socket.socket) -> bool:
    poller = select.poll()
    poller.register(sock, select.POLLOUT)
    return bool(poller.poll(0))


def _parts(head: bytes, frames) -> list:
    """One message's pieces, in the order they go out: prefix, frame lengths,
    header, frames."""
    views = [memoryview(getattr(f, "buffer", f)).cast("B") for f in frames]
    return [PREFIX.pack(len(head), len(views)), *(FRAME_LENGTH.pack(len(v)) for v in views), head, *views]


def _frames_of(view: memoryview, offset: int, lengths: list[int]) -> list[LaneFrame]:
    """Consecutive payload frames of these lengths in `view` from `offset`."""
    frames = []
    for length in lengths:
        frames.append(LaneFrame(view[offset:offset + length]))
        offset += length
    return frames
