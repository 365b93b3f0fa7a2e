"""A fuzzer for rcuda servers: malformed and mutated messages, bounded in
count and time.

It opens a real session (hello, then `open` on device 0's lane where the
server offers lanes, else on its socket, like a client), then sends, on
that connection (well-framed messages on a lane: a framing error closes it,
which the run does once at the end), the daemon's socket, the device's
other socket, the session's heartbeat socket and its peer port (a lane,
sealed on a --auth server, opened with the peer token): random
bytes, msgpack
values that are not maps, headers of every op in rcuda.protocol.OPS with
fields of wrong types or hostile values (negative, huge, random pointers,
unknown ids, sometimes the session's real tokens), random payload frames,
well-framed `launches` records (memory operations and unknown kernels, with
parameter blocks up to beyond CUDA's 32,764 bytes, some claiming more bytes
than follow) with hostile fields, and bit-flipped copies of valid requests.
It drains replies as it goes and counts them, and keeps the session alive with valid heartbeats.  With
`curve` (a server run with --auth) every socket uses the client's keys.
A server passes when it is still up afterwards and a normal client still
runs correctly (the tests and benchmarks/fuzz.py check that).

`Stranger` is the attacker without a key: against a --auth server it sends
the same kinds of frames with no key or an unknown one, and raw bytes to
the port; nothing it sends may get an answer.

    python -m rcuda.fuzz HOST:PORT [--frames N] [--seconds S] [--seed K] [--stranger]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import random
import socket
import sys
import time
from dataclasses import asdict, dataclass, field

import msgpack
import zmq

from rcuda import auth, protocol, wire
from rcuda.config import parse_server
from rcuda.errors import ProtocolError
from rcuda.launch_rules import MAX_PARAM_BYTES
from rcuda.lane import PREFIX, Lane, LaneClosed, dial, set_timeouts

#: Share of lane messages sent as tampered records on a sealed lane (each
#: ends the lane, and a new session carries on).
TAMPER_SHARE = 0.002
HOSTILE_INTS = [0, 1, -1, 2**31 - 1, 2**31, 2**32, 2**63 - 1, -(2**63), 2**64 - 1, 4096, 0x7000_0000_0000,
                0x1000_0000_0000, 0x2000_0000_0000]


@dataclass
class FuzzReport:
    frames_sent: int = 0
    replies: int = 0
    error_replies: int = 0
    seconds: float = 0.0
    session_ok: bool = False
    lane_frames_sent: int = 0
    lane_replies: int = 0
    lane_timeouts: int = 0
    lane_timeout_ops: list = field(default_factory=list)  # what the unanswered lane requests were
    lane_resets: int = 0  # the lane broke (or the session ended) mid-run: a new session carried on
    lane_closed_on_garbage: bool | None = None  # None: the server offered no lane
    lane_sealed: bool = False  # the lane was sealed (a --auth server): its records were attacked too
    peer_frames_sent: int = 0  # messages sent on the peer port's connection
    peer_resets: int = 0  # ... after which it was closed (bad framing), and opened again
    tampered_records: int = 0  # records altered, replayed or reordered on a sealed lane
    tampered_answered: int = 0  # ... that the server answered instead of closing the lane: must stay 0


class Fuzzer:
    def __init__(self, address: str, seed: int = 0, timeout: float = 5.0, curve: auth.Curve | None = None):
        self.address = parse_server(address)
        self.rng = random.Random(seed)
        self.timeout = timeout
        self.curve = curve
        self.context = zmq.Context()
        self.report = FuzzReport()
        self.valid_pointers: list[int] = []
        self.tokens: list[str] = []  # the session's own: messages that get past the token checks
        self._last_ping = 0.0
        #: sources named by the well-formed peer_waits sent: a wait blocks its GPU
        #: until its transfer comes or is aborted, so they are aborted at the end
        self.wait_sources: set[str] = set()
        self.lane: Lane | None = None  # the session's connection to GPU0, where the server offers lanes

    # ---------------------------------------------------------- sockets

    def _socket(self, endpoint: str) -> zmq.Socket:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 0)
        auth.apply(sock, self.curve)
        sock.connect(endpoint)
        return sock

    def _call(self, sock: zmq.Socket, header: dict, frames=()) -> dict:
        sock.send_multipart([protocol.pack(header), *frames])
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if sock.poll(100):
                reply = protocol.unpack(sock.recv_multipart()[0])
                if reply.get("seq") == header.get("seq"):
                    return reply
        raise TimeoutError(f"no reply to {header['op']} within {self.timeout}s")

    def open_session(self):
        """A real session: the daemon's hello, then `open` on device 0."""
        daemon = self._socket(self.address.endpoint)
        hello = self._call(daemon, {"op": "hello", "seq": 1, "version": protocol.PROTOCOL_VERSION,
                                    "client": {"host": "fuzzer", "pid": 0, "program": "rcuda.fuzz"}})
        if hello.get("err"):
            raise RuntimeError(f"hello refused: {hello}")
        self.lane = self._open_lane(hello)
        device = self._socket(self.address.endpoint_for_port(hello["ports"][0]))
        call = self._lane_call if self.lane is not None else lambda header: self._call(device, header)
        opened = call({"op": "open", "seq": 1, "dev": 0, "token": hello["token"], "va_base": None})
        if opened.get("err"):
            raise RuntimeError(f"open refused: {opened}")
        self.report.session_ok = True
        for size in (64, 4096, 1 << 20):
            reply = call({"op": "malloc", "seq": 2, "size": size})
            if not reply.get("err"):
                self.valid_pointers.append(reply["ptr"])
        self.token = hello["token"]
        self.tokens = [hello["token"]] + ([hello["peer_token"]] if hello.get("peer_token") else [])
        self.control = self._socket(self.address.endpoint_for_port(hello["control_port"]))
        self.peer_hello = hello
        self.peer = self._open_peer() if hello.get("peer_port") else None
        return daemon, device

    def _open_lane(self, hello: dict) -> Lane | None:
        """GPU0's lane, as a client connects it (before `open`)."""
        if not hello.get("lane_ports"):
            return None
        # Sealed on a --auth server (rcuda/sealed.py): its records are attacked too.
        lane = dial(self.address.host, hello["lane_ports"][0], self.timeout, hello.get("lane_secret"))
        self.report.lane_sealed = lane.seal is not None
        lane.send({"op": "lane", "seq": 0, "token": hello["token"], "dev": 0})
        if lane.receive()[0].get("err"):
            raise RuntimeError("lane refused")
        return lane

    def _open_peer(self) -> Lane:
        """A connection to the session's peer port, opened with the peer token
        (a connection whose first message lacks it is closed)."""
        hello = self.peer_hello
        peer = dial(self.address.host, hello["peer_port"], self.timeout, hello.get("peer_secret"))
        peer.send({"op": "peer_hello", "seq": 0, "token": hello["peer_token"]})
        if peer.receive()[0].get("err"):
            raise RuntimeError("peer_hello refused")
        return peer

    def _send_on_peer(self) -> None:
        """A fuzzed message on the peer port, well framed (or, one time in
        fifty, bytes that are not: the port closes the connection, and a new
        one carries on); the answers it gets are read as they come."""
        parts = self.message()
        if not parts:
            return
        self.report.peer_frames_sent += 1
        try:
            if self.rng.random() < 0.02:
                self.peer.sock.sendall(PREFIX.pack(1 << 30, 0) + self.rng.randbytes(32))
                raise LaneClosed("framing broken on purpose")
            self.peer.send_raw(parts[0], parts[1:])
            while self.peer.readable():
                self.peer.receive()
        except (LaneClosed, OSError, ProtocolError):
            self.report.peer_resets += 1
            self.peer.close()
            self.peer = self._open_peer()

    def _lane_call(self, header: dict) -> dict:
        self.lane.send(header)
        while True:
            reply, _ = self.lane.receive()
            if reply.get("seq") == header["seq"]:
                return reply

    def lane_message(self) -> tuple[dict | bytes, list[bytes]]:
        """A well-framed lane message: a fuzzed request, or a header that is
        not a map; sometimes an htod with a large payload."""
        if self.rng.random() < 0.05:
            return msgpack.packb(self._value()), self._frames()
        header = self._header()
        header.pop("async", None)
        frames = self._frames()
        if self.rng.random() < 0.03:
            header["op"] = "htod"
            frames = [self.rng.randbytes(self.rng.choice([1 << 20, 3 << 20]))]
        return header, frames

    def _send_on_lane(self) -> None:
        if self.lane.seal is not None and self.rng.random() < TAMPER_SHARE:
            self._tamper_on_lane()
            return
        header, frames = self.lane_message()
        if isinstance(header, bytes):  # not a map: sent as it is
            self.lane.send_raw(header, frames)
            answered = True
        else:
            self.lane.send(header, frames)
            try:
                answered = protocol.expects_reply(header) if self._note_wait(header) else True
            except ProtocolError:
                answered = True  # refused, with a reply
        self.report.lane_frames_sent += 1
        if answered:
            try:
                self.lane.receive()
                self.report.lane_replies += 1
            except (BlockingIOError, TimeoutError):
                self.report.lane_timeouts += 1
                self.report.lane_timeout_ops.append(str(header.get("op") if isinstance(header, dict) else "?"))

    def _tamper_on_lane(self) -> None:
        """A well-formed request in records altered, replayed or reordered on
        the way: the server must close the lane (LaneClosed, counted as a
        reset by the caller), not answer."""
        records = [bytes(r) for r in self.lane.seal.records([protocol.pack({"op": "mem_info", "seq": 7})])]
        records += [bytes(r) for r in self.lane.seal.records([protocol.pack({"op": "mem_info", "seq": 8})])]
        attack = self.rng.choice(["altered", "replayed", "reordered", "cut"])
        if attack == "altered":  # in the ciphertext or the tag (a longer head would wait for more bytes)
            flipped = bytearray(records[0])
            flipped[self.rng.randrange(wire.RECORD_HEAD.size, len(flipped))] ^= 1 << self.rng.randrange(8)
            sent = bytes(flipped) + records[1]
        elif attack == "replayed":
            sent = records[0] + records[0]
        elif attack == "reordered":
            sent = records[1] + records[0]
        else:  # a record's head claiming nothing, or more than a record may hold
            sent = wire.RECORD_HEAD.pack(self.rng.choice([0, wire.RECORD_MAX + 1, 2**32 - 1])) + records[0]
        self.report.tampered_records += 1
        self.lane.sock.sendall(sent)
        try:
            while True:
                reply, _ = self.lane.receive()
                if reply.get("seq") == 8 or (attack != "replayed" and reply.get("seq") == 7):
                    self.report.tampered_answered += 1
        except (BlockingIOError, TimeoutError):
            self.report.tampered_answered += 1  # still open: it should have been closed
            raise LaneClosed("the server kept a tampered lane open") from None

    def _garbage_on_lane(self) -> None:
        """Bad framing: the server must close the lane (and only the lane)."""
        self.lane.sock.sendall(PREFIX.pack(1 << 30, 1) + self.rng.randbytes(64))
        try:
            while True:
                self.lane.receive()
        except LaneClosed:
            self.report.lane_closed_on_garbage = True
        except (BlockingIOError, TimeoutError):
            self.report.lane_closed_on_garbage = False
        self.lane.close()

    def _keep_alive(self) -> None:
        """A valid heartbeat now and then: the worker ends a silent session."""
        if time.monotonic() - self._last_ping > 1.0:
            self.control.send(protocol.pack({"op": "ping", "seq": 0, "token": self.token}))
            self._last_ping = time.monotonic()

    # ---------------------------------------------------------- messages

    def _value(self):
        r = self.rng.random()
        if r < 0.35:
            return self.rng.choice(HOSTILE_INTS + [p + self.rng.randrange(-64, 1 << 21) for p in self.valid_pointers])
        if r < 0.45:
            return self.rng.randrange(-1000, 1000)
        if r < 0.55:
            return "".join(self.rng.choice("abc\x00\xff/") for _ in range(self.rng.randrange(0, 40)))
        if r < 0.62:
            return [self._value() for _ in range(self.rng.randrange(0, 5))]
        if r < 0.68:
            return {"x": self._value()}
        if r < 0.74:
            return None
        if r < 0.80:
            return self.rng.random() * 1e12
        if r < 0.85:
            return bool(self.rng.getrandbits(1))
        return self.rng.randbytes(self.rng.randrange(0, 64))

    def _header(self) -> dict:
        # Every op but `close`, which would end the session being fuzzed.
        op = self.rng.choice([o for o in protocol.OPS if o != "close"] + ["", "nope", "launch\x00"])
        header = {"op": op, "seq": self.rng.choice([self.rng.randrange(1 << 30), None, "x", -5])}
        optional = protocol.OPTIONAL_FIELDS.get(op, {}).items()
        for name, kind in [*protocol.OPS.get(op, {}).items(), *optional]:
            if self.rng.random() < 0.9:
                header[name] = self._plausible(kind) if self.rng.random() < 0.6 else self._value()
        if self.rng.random() < 0.2:
            header["async"] = self._value() if self.rng.random() < 0.5 else True
        if self.rng.random() < 0.1:
            header[self.rng.choice(["extra", "token", "dev"])] = self._value()
        return header

    def _plausible(self, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if int in kinds:
            return self.rng.choice(HOSTILE_INTS + [self.rng.randrange(0, 1 << 16)] +
                                   [p + self.rng.randrange(0, 4096) for p in self.valid_pointers])
        if str in kinds:
            return self.rng.choice(["", "m", "0" * 32, "_Z5emptyi", "cudaFuncAttributeMaxDynamicSharedMemorySize",
                                    "cudaLaunchAttributeAccessPolicyWindow", "cudaLaunchAttributeMemSyncDomainMap",
                                    *self.tokens])
        if list in kinds:
            return [self.rng.choice(HOSTILE_INTS) for _ in range(self.rng.choice([0, 1, 3, 3, 4, 1000]))]
        if dict in kinds:
            return {"host": "x"}
        return None

    def _frames(self) -> list[bytes]:
        frames = []
        for _ in range(self.rng.choice([0, 0, 1, 1, 2, 5])):
            size = self.rng.choice([0, 1, 7, 44, 48, 52, 4096, MAX_PARAM_BYTES, MAX_PARAM_BYTES + 4, 65536])
            frames.append(self.rng.randbytes(size))
        return frames

    def _launch_records(self) -> tuple[int, bytes]:
        """(count, frame) of well-framed `launches` records: kernels of
        unknown ids and memory operations (protocol.RECORD_*) with hostile
        fields, so that they pass the framing and reach the checks; one in
        ten claims more parameter bytes than follow."""
        records = []
        for _ in range(self.rng.randrange(1, 6)):
            kind = self.rng.choice([wire.RECORD_MEMSET, wire.RECORD_HTOD, wire.RECORD_DTOD,
                                    wire.RECORD_FIRST_OP, self.rng.randrange(1, 1 << 32)])
            fields = [self._plausible(int) % (1 << 64) for _ in range(3)]
            if kind == wire.RECORD_MEMSET:
                params = wire.MEMSET_FIELDS.pack(fields[0], fields[1], fields[2] % (1 << 32))
            elif kind == wire.RECORD_DTOD:
                params = wire.DTOD_FIELDS.pack(*fields)
            elif kind < wire.RECORD_FIRST_OP:  # a kernel's parameter block, up to beyond CUDA's limit
                params = self.rng.randbytes(self.rng.choice([0, 8, MAX_PARAM_BYTES, MAX_PARAM_BYTES + 4]))
            else:
                params = wire.HTOD_FIELDS.pack(fields[0]) + self.rng.randbytes(self.rng.choice([0, 1, 4096]))
            if self.rng.random() < 0.1:  # fields of the wrong length
                params = params[:self.rng.randrange(len(params) + 1)]
            stream = self.rng.choice([0, 0, 1, 2**64 - 1])
            claimed = len(params)
            if self.rng.random() < 0.1:  # a parameter block running past the batch's end
                claimed = self.rng.choice([len(params) + 8, MAX_PARAM_BYTES + 8, 2**32 - 1])
            record = wire.LAUNCH_RECORD.pack(kind, 0, 1, 1, 1, 1, 1, 1, stream, claimed) + params
            records.append(record + bytes(-len(record) % 8))
        return len(records), b"".join(records)

    def message(self) -> list[bytes]:
        r = self.rng.random()
        if r < 0.05:
            return [self.rng.randbytes(self.rng.randrange(0, 200))]
        if r < 0.10:
            return [msgpack.packb(self._value())]
        if r < 0.13:
            return []  # an empty multipart: zmq sends nothing, kept for the count
        if r < 0.16:  # records that parse, with hostile contents
            count, frame = self._launch_records()
            return [protocol.pack({"op": "launches", "seq": self.rng.randrange(1 << 30), "count": count}), frame]
        header = protocol.pack(self._header())
        if r < 0.25:  # bit flips in a valid-looking header
            data = bytearray(header)
            for _ in range(self.rng.randrange(1, 4)):
                data[self.rng.randrange(len(data))] ^= 1 << self.rng.randrange(8)
            header = bytes(data)
        if r < 0.30:  # truncated
            header = header[:self.rng.randrange(len(header))]
        return [header, *self._frames()]

    # ---------------------------------------------------------- the run

    def run(self, frames: int, seconds: float) -> FuzzReport:
        started = time.monotonic()
        daemon, device = self.open_session()
        sockets = self._targets(daemon, device)
        try:
            while self.report.frames_sent < frames and time.monotonic() - started < seconds:
                self.report.frames_sent += 1
                if self.peer is not None and self.rng.random() < 0.05:
                    self._send_on_peer()
                    continue
                if self.lane is not None and self.rng.random() < 0.5:
                    self._release_waits()  # a peer_wait holds the GPU thread, and the lane's reply with it
                    try:
                        self._send_on_lane()
                    except (LaneClosed, OSError):  # counted; a new session goes on
                        self.report.lane_resets += 1
                        daemon, device, sockets = self._new_session(sockets)
                    continue
                parts = self.message()
                sock = self.rng.choice(sockets)
                if parts:
                    sock.send_multipart(parts)
                    if sock is device:
                        with contextlib.suppress(Exception):  # most fuzzed frames are not even msgpack
                            self._note_wait(protocol.unpack(parts[0]))
                if self.report.frames_sent % 64 == 0:
                    self._keep_alive()
                    self._drain(sockets)
            self._release_waits()
            self._settle(daemon, device)
            if self.lane is not None:
                self._garbage_on_lane()
        finally:
            for sock in sockets:
                sock.close(linger=0)
            if self.peer is not None:
                self.peer.close()
            self.context.term()
        self.report.seconds = time.monotonic() - started
        return self.report

    def _new_session(self, sockets: list):
        """After the lane broke: the old session's sockets closed, a new
        session opened.  (daemon, device, every socket to fuzz)."""
        for sock in set(sockets):
            sock.close(linger=0)
        for lane in (self.lane, self.peer):
            if lane is not None:
                lane.close()
        self.wait_sources.clear()
        daemon, device = self.open_session()
        return daemon, device, self._targets(daemon, device)

    def _targets(self, daemon: zmq.Socket, device: zmq.Socket) -> list:
        """The sockets fuzzed frames go to, the device's thrice as often."""
        return [device, device, device, daemon, self.control]

    def _note_wait(self, header: dict) -> bool:
        """Remember the source a well-formed peer_wait names, on the device's
        socket or its lane alike (ProtocolError for an ill-formed header).
        True: the header is well-formed."""
        if protocol.check_header(header) == "peer_wait":
            self.wait_sources.add(header["source"])
        return True

    def _release_waits(self) -> None:
        """Abort every transfer from the sources our peer_waits named (as a
        client does when a source server is lost), so that the GPU thread,
        blocked in a wait for bytes no one sends, carries on."""
        if self.peer is None or len(self.tokens) < 2 or not self.wait_sources:
            return
        # On a connection of their own, answered (a peer_hello after them):
        # the fuzzed one may be about to be closed for what was fuzzed on it.
        releaser = self._open_peer()
        try:
            for source in self.wait_sources:
                releaser.send({"op": "peer_abort", "seq": 0, "token": self.tokens[1], "xfer": None,
                               "source": source, "upto": 2**64 - 1, "msg": "fuzzing over"})
            releaser.send({"op": "peer_hello", "seq": 0, "token": self.tokens[1]})
            releaser.receive()  # the aborts before it were handled
        finally:
            releaser.close()
        self.wait_sources.clear()  # later waits for these sources fail at once (upto)

    def _settle(self, daemon: zmq.Socket, device: zmq.Socket) -> None:
        """Wait until the server has read everything: its answer to a last
        request on each connection comes after all the frames before it."""
        if self.lane is not None:
            set_timeouts(self.lane.sock, max(self.timeout, 120.0), self.timeout)
            self._lane_call({"op": "mem_info", "seq": 1 << 40})
        for sock, header in ((daemon, {"op": "info", "version": protocol.PROTOCOL_VERSION}),
                             (device, {"op": "mem_info"})):
            seq = 1 << 40
            sock.send_multipart([protocol.pack(dict(header, seq=seq))])
            deadline = time.monotonic() + max(self.timeout, 120.0)
            while time.monotonic() < deadline:
                self._keep_alive()  # a long wait here must not end the session
                if not sock.poll(100):
                    continue
                parts = sock.recv_multipart()
                self.report.replies += 1
                try:
                    reply = protocol.unpack(parts[0])
                except Exception:  # noqa: BLE001 - counted, not fatal
                    continue
                self.report.error_replies += bool(reply.get("err"))
                if reply.get("seq") == seq:
                    break
            else:
                raise TimeoutError(f"the server did not answer {header['op']} after the fuzzing")

    def _drain(self, sockets, wait: float = 0.0) -> None:
        deadline = time.monotonic() + wait
        while True:
            got = False
            for sock in set(sockets):
                while sock.poll(0):
                    parts = sock.recv_multipart()
                    got = True
                    self.report.replies += 1
                    try:
                        if protocol.unpack(parts[0]).get("err"):
                            self.report.error_replies += 1
                    except Exception:  # noqa: BLE001 - a reply we cannot read is counted, not fatal
                        pass
            if not got and time.monotonic() >= deadline:
                return
            if not got:
                time.sleep(0.01)


class Stranger:
    """Frames from someone without an accepted key: none may be answered."""

    def __init__(self, address: str, seed: int = 0, server_key: bytes | None = None):
        self.address = parse_server(address)
        self.rng = random.Random(seed)
        self.server_key = server_key  # known to anyone: the server's public key
        self.frames = Fuzzer(address, seed)  # for its message generator only
        self.report = FuzzReport()

    def run(self, frames: int, seconds: float, ports: list[int] = ()) -> FuzzReport:
        """Send `frames` messages to the daemon's port (and `ports`): with no
        key, with a fresh unknown key, and as raw bytes over TCP."""
        started = time.monotonic()
        context = zmq.Context()
        sockets = []
        try:
            for port in [self.address.port, *ports]:
                endpoint = self.address.endpoint_for_port(port)
                for curve in (None, self._unknown_key()):
                    sock = context.socket(zmq.DEALER)
                    sock.setsockopt(zmq.LINGER, 0)
                    sock.setsockopt(zmq.SNDHWM, 1000)
                    auth.apply(sock, curve)
                    sock.connect(endpoint)
                    sockets.append(sock)
            while self.report.frames_sent < frames and time.monotonic() - started < seconds:
                parts = self.frames.message()
                if self.rng.random() < 0.02:
                    self._raw_tcp(self.rng.choice([self.address.port, *ports]))
                elif parts:
                    try:
                        self.rng.choice(sockets).send_multipart(parts, zmq.NOBLOCK)
                    except zmq.Again:
                        pass  # never connected (refused handshakes): nothing queues up
                self.report.frames_sent += 1
                if self.report.frames_sent % 256 == 0:
                    for sock in sockets:
                        while sock.poll(0):
                            sock.recv_multipart()
                            self.report.replies += 1
            time.sleep(1.0)
            for sock in sockets:
                while sock.poll(100):
                    sock.recv_multipart()
                    self.report.replies += 1
        finally:
            for sock in sockets:
                sock.close(linger=0)
            context.term()
        self.report.seconds = time.monotonic() - started
        return self.report

    def _unknown_key(self) -> auth.Curve | None:
        if self.server_key is None:
            return None
        public, secret = zmq.curve_keypair()
        return auth.Curve(public, secret, self.server_key)

    def _raw_tcp(self, port: int) -> None:
        """Bytes that are not ZeroMQ, or a ZMTP greeting followed by junk."""
        mechanism = self.rng.choice([b"NULL", b"CURVE", b"PLAIN"]).ljust(20, b"\0")
        greeting = b"\xff" + bytes(8) + b"\x7f\x03\x00" + mechanism
        payload = self.rng.choice([self.rng.randbytes(self.rng.randrange(1, 512)),
                                   greeting + bytes(32) + self.rng.randbytes(self.rng.randrange(0, 300))])
        try:
            with socket.create_connection((self.address.host, port), timeout=2) as conn:
                conn.sendall(payload)
        except OSError:
            pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rcuda.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("server", help="HOST:PORT of an rcuda server (use --memory-limit on it)")
    parser.add_argument("--frames", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stranger", action="store_true",
                        help="fuzz as someone without an accepted key (for a server with --auth)")
    args = parser.parse_args(argv)
    from rcuda.config import ClientConfig
    keys = auth.ClientKeys.from_config(ClientConfig.load())  # RCUDA_KEY, RCUDA_SERVER_KEY for --auth servers
    curve = keys.for_server(parse_server(args.server))
    if args.stranger:
        report = Stranger(args.server, args.seed, curve.server if curve else None).run(args.frames, args.seconds)
    else:
        report = Fuzzer(args.server, args.seed, curve=curve).run(args.frames, args.seconds)
    print(json.dumps(asdict(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
