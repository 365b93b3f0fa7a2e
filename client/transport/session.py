"""A client's session with one `rcuda server`.

`ServerSession.connect` says hello to the server's daemon, which hands over a
session worker (a process of its own on the server) and the ports of its
per-GPU sockets.  The session then keeps a heartbeat going with the worker on
a separate socket: the worker ends the session (freeing everything) when the
client goes silent, and the client fails its waiting calls when the worker
does.  The devices' links stay free of heartbeat traffic.

With a server run with --auth, every socket to it (daemon, GPU, heartbeat)
carries the client's CURVE keys (`curve`, from rcuda.auth.ClientKeys); a
refused handshake becomes an AuthenticationError at connect, saying why.
A hello that has to queue for a worker keeps waiting while the daemon
reports that its place in the queue improves.
"""
from __future__ import annotations

import logging
import os
import socket as pysocket
import sys
import threading
import time

import zmq

from rcuda import auth, protocol
from rcuda.auth import Curve
from rcuda.config import ServerAddress
from rcuda.errors import AuthenticationError, ProtocolError, TransportError, VersionMismatch, CudaError
from rcuda.wire import SEAL_KEY

log = logging.getLogger(__name__)

def client_description() -> dict:
    """Who is asking, for the server's logs and `rcuda smi`."""
    try:
        program = os.path.basename(os.readlink("/proc/self/exe"))
    except OSError:
        program = os.path.basename(sys.argv[0]) if sys.argv else "?"
    return {"host": pysocket.gethostname(), "pid": os.getpid(), "program": program}


def request_once(context: zmq.Context, address: ServerAddress, header: dict, timeout: float,
                 curve: Curve | None = None) -> dict:
    """One request to a server's daemon, waiting at most `timeout` seconds
    (counted afresh whenever a queued hello moves up: see the daemon's
    progress messages).  `curve`: our key pair and the server's public key
    when the server runs with --auth; a refused handshake fails at once with
    AuthenticationError, saying why."""
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    auth.apply(sock, curve)
    watch = auth.HandshakeWatch(sock)
    try:
        sock.connect(address.endpoint)
        header = dict(header, seq=1)
        sock.send(protocol.pack(header))
        reply = _await_reply(sock, watch, address, timeout, curve)
    finally:
        watch.close()
        sock.close(linger=0)
    if reply.get("version") != protocol.PROTOCOL_VERSION:
        raise VersionMismatch(f"rcuda server at {address} speaks protocol version {reply.get('version')}, "
                              f"this client speaks {protocol.PROTOCOL_VERSION}: install the same rcuda "
                              f"version on both sides")
    if reply.get("err"):
        raise CudaError(reply["err"], f"rcuda server at {address}: {reply.get('msg', '')}")
    return reply


def _await_reply(sock, watch: auth.HandshakeWatch, address: ServerAddress, timeout: float, curve) -> dict:
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(watch.monitor, zmq.POLLIN)
    deadline = time.monotonic() + timeout
    position = None  # our place in the daemon's queue of hellos, while it has no worker for us
    while (left := deadline - time.monotonic()) > 0:
        ready = dict(poller.poll(int(left * 1000) + 1))
        if watch.monitor in ready and watch.read() is not None and not watch.succeeded:
            raise AuthenticationError(auth.explain_handshake_failure(watch.failure, address, curve))
        if sock in ready:
            reply = protocol.unpack(sock.recv())
            if not reply.get("progress"):
                return reply
            queued = reply.get("queued")
            if isinstance(queued, int) and (position is None or queued < position):
                position, deadline = queued, time.monotonic() + timeout  # moving up: keep waiting
    if watch.read() is not None and not watch.succeeded:
        raise AuthenticationError(auth.explain_handshake_failure(watch.failure, address, curve))
    where = f" (still queued at position {position} for a session worker)" if position is not None else ""
    raise TransportError(f"no answer from rcuda server at {address} within {timeout:g}s{where} "
                         f"(is `rcuda server` running there? RCUDA_TIMEOUT={timeout:g})")


class ServerSession:
    """The session with one server: its worker's ports and the heartbeat."""

    def __init__(self, context: zmq.Context, address: ServerAddress, reply: dict, timeout: float,
                 curve: Curve | None = None):
        self.address = address
        self.context = context
        self.timeout = timeout
        #: CURVE settings for every socket to this server (None: no --auth).
        self.curve = curve
        #: Where its driver reserved the program's VMM window (client/state.py)
        #: once the devices are open: cuMemMap works on its GPUs where this is
        #: the program's window.
        self.vmm_base: int | None = None
        try:
            self.token: str = reply["token"]
            self.ports: list[int] = list(reply["ports"])
            self.devices: list[dict] = list(reply["devices"])
            self.server: dict = dict(reply.get("server", {}))
            control_port: int = reply["control_port"]
            # The worker's peer port, for copies from other servers (server/peer.py).
            self.peer_port: int | None = reply.get("peer_port")
            self.peer_token: str | None = reply.get("peer_token")
            # With --auth: the secret that seals connections to the peer port,
            # which other servers' workers copying to this session are given.
            self.peer_secret: bytes | None = reply.get("peer_secret")
            # A lane port per GPU (rcuda/lane.py); with --auth the lanes are
            # sealed with keys made from the session's lane secret (rcuda/sealed.py).
            self.lane_ports: list[int] | None = reply.get("lane_ports")
            self.lane_secret: bytes | None = reply.get("lane_secret")
        except (KeyError, TypeError) as exc:
            raise ProtocolError(f"malformed hello reply from {address}: {exc}") from None
        if self.lane_ports is not None and (not isinstance(self.lane_ports, list)
                                            or len(self.lane_ports) != len(self.ports)):
            raise ProtocolError(f"hello reply from {address}: lane_ports {self.lane_ports!r:.60} does not "
                                f"match its {len(self.ports)} device ports")
        for name in ("lane_secret", "peer_secret"):
            secret = getattr(self, name)
            if secret is not None and (not isinstance(secret, bytes) or len(secret) != SEAL_KEY):
                raise ProtocolError(f"hello reply from {address}: a {name} that is not {SEAL_KEY} bytes")
        if len(self.ports) != len(self.devices):
            raise ProtocolError(f"hello reply from {address} lists {len(self.devices)} devices "
                                f"but {len(self.ports)} ports")
        self.last_heard = time.monotonic()
        self._on_failure = []
        self._on_heard = []
        self._stop = threading.Event()
        self._wake_read, self._wake_write = os.pipe()
        self._wake_lock = threading.Lock()
        self.failure: TransportError | None = None
        self._heartbeat = threading.Thread(target=self._heartbeat_loop, args=(control_port,),
                                           name=f"rcuda heartbeat {address}", daemon=True)
        self._heartbeat.start()

    @classmethod
    def connect(cls, context: zmq.Context, address: ServerAddress, timeout: float,
                curve: Curve | None = None) -> "ServerSession":
        reply = request_once(context, address, {"op": "hello", "version": protocol.PROTOCOL_VERSION,
                                                "client": client_description(), "progress": True},
                             timeout, curve)
        return cls(context, address, reply, timeout, curve)

    @property
    def socket_options(self) -> dict:
        """Options for every socket to this server's worker."""
        return self.curve.options if self.curve is not None else {}

    def endpoint(self, local_index: int) -> str:
        return self.address.endpoint_for_port(self.ports[local_index])

    def lane_address(self, local_index: int) -> tuple[str, int] | None:
        """(host, port) of a GPU's lane, if the server offers lanes."""
        return None if self.lane_ports is None else (self.address.host, self.lane_ports[local_index])

    @property
    def peer_endpoint(self) -> str | None:
        """Where other servers send this session's incoming peer copies (its peer port)."""
        return None if self.peer_port is None else self.address.endpoint_for_port(self.peer_port)

    def liveness(self) -> float:
        return self.last_heard

    def on_heard(self, callback) -> None:
        """Call `callback(monotonic time)` whenever the server answers a
        heartbeat (a device link's calls wait while it does)."""
        self._on_heard.append(callback)

    def on_failure(self, callback) -> None:
        """Call `callback(error)` if the server is lost."""
        self._on_failure.append(callback)
        if self.failure:
            callback(self.failure)

    def stop_heartbeat(self) -> None:
        """Stop pinging without waiting (the worker ends once the client has
        closed its devices, and must then not be taken for a lost server)."""
        with self._wake_lock:  # the thread closes the pipe as it ends
            if not self._stop.is_set():
                self._stop.set()
                if self._wake_write is not None:
                    os.write(self._wake_write, b"x")

    def close(self) -> None:
        self.stop_heartbeat()
        self._heartbeat.join(timeout=2 * protocol.HEARTBEAT_INTERVAL)

    def _heartbeat_loop(self, control_port: int) -> None:
        sock = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        auth.apply(sock, self.curve)
        sock.connect(self.address.endpoint_for_port(control_port))
        # The wake-up pipe: stop_heartbeat() ends the wait at once, so the
        # program's exit is not kept waiting for the rest of an interval.
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_read, zmq.POLLIN)
        seq = 0
        try:
            while not self._stop.is_set():
                seq += 1
                sock.send(protocol.pack({"op": "ping", "seq": seq, "token": self.token}))
                deadline = time.monotonic() + protocol.HEARTBEAT_INTERVAL
                while (left := deadline - time.monotonic()) > 0 and not self._stop.is_set():
                    if sock in dict(poller.poll(int(left * 1000) + 1)):
                        sock.recv()
                        self.last_heard = time.monotonic()
                        for callback in self._on_heard:
                            callback(self.last_heard)
                silent = time.monotonic() - self.last_heard
                if silent > self.timeout and not self._stop.is_set():
                    self._lost(TransportError(f"rcuda server at {self.address} stopped answering "
                                              f"({silent:.1f}s without a heartbeat, RCUDA_TIMEOUT="
                                              f"{self.timeout:g}s)"))
                    return
        finally:
            sock.close(linger=0)
            with self._wake_lock:
                os.close(self._wake_read)
                os.close(self._wake_write)
                self._wake_write = None

    def _lost(self, error: TransportError) -> None:
        log.error("%s", error)
        self.failure = error
        for callback in self._on_failure:
            callback(error)
