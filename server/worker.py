"""A session worker: one process per client session.

The daemon starts workers ahead of need (a warm spare), so a client's hello
is answered without waiting for a process and a backend to start.  A worker:

  1. opens the backend, binds one socket per GPU and one heartbeat socket on
     the daemon's interface, and prints one line (base64 msgpack): its ports
     and the GPUs' properties;
  2. waits for its assignment on stdin (a JSON line with the session token);
  3. serves the session: a DeviceService thread per GPU, heartbeats here;
  4. ends when the client closes every device, when the client falls silent
     for `session_timeout` seconds, or when the daemon goes away (stdin
     closes).  Ending frees everything the session allocated; being a
     process of its own, a crash or sticky error here touches no one else.

Run by the daemon as `python -m rcuda.server.worker CONFIG_JSON` would (see
server/daemon.py, WORKER_MAIN).
"""
from __future__ import annotations

import base64
import json
import os
import logging
import sys
import threading
import time

import zmq

from rcuda import protocol
from rcuda.errors import ProtocolError
from rcuda.log import setup_server_logging
from rcuda.server.backends import create_backend
from rcuda.server.device_service import DeviceService
from rcuda.server import ipc
from rcuda.server.address_windows import SessionWindows
from rcuda.auth import ServerAuth
from rcuda.server.peer import Inbox, PeerReceiver, buffer_limit

log = logging.getLogger("rcuda.server.worker")  # not __name__: run as __main__


class SessionWorker:
    def __init__(self, config: dict):
        self.config = config
        self.backend = create_backend(config["backend"], config.get("devices"), config.get("kernels", []),
                                      memory_bytes=config.get("memory_limit"), identity=config.get("identity", ""))
        self.context = zmq.Context()
        host = config["bind_host"]
        count = self.backend.device_count()
        # --auth: this process checks the keys of whoever connects to its sockets,
        # and its session gets a peer key for copies from other servers (rcuda/auth.py).
        self.auth = ServerAuth(config["auth"]) if config.get("auth") else None
        # --auth: the lanes are sealed with keys made from these secrets,
        # which the client gets in the CURVE-encrypted hello reply
        # (rcuda/sealed.py): the GPUs' lanes with the lane secret, the peer
        # port's with the peer secret, which the client hands to other
        # servers' workers that copy to this session (server/peer.py).
        self.lane_secret: bytes | None = None
        self.peer_secret: bytes | None = None
        if self.auth is not None:
            self.auth.start(self.context)
            from rcuda import sealed
            self.lane_secret, self.peer_secret = sealed.new_secret(), sealed.new_secret()
        protect = self.auth.protect if self.auth is not None else None
        # The peer socket: cudaMemcpyPeer bytes from other servers' workers.
        inbox = Inbox(buffer_limit(config.get("memory_limit"), config.get("peer_buffer")))
        self.peer_receiver = PeerReceiver(host, inbox, secret=self.peer_secret)
        self.windows = SessionWindows(self.backend)  # the session's address windows, on all its GPUs
        self.services = [DeviceService(self.context, self.backend, i, host, inbox=self.peer_receiver.inbox,
                                       peer_token=self.peer_receiver.token, protect=protect,
                                       lane_secret=self.lane_secret, spin_us=config.get("spin_us", 300.0),
                                       windows=self.windows)
                         for i in range(count)]
        for service in self.services:
            service.peer_ops.require_sealed = self.auth is not None
        self.control = self.context.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.LINGER, 0)
        if protect is not None:
            protect(self.control)
        self.control_port = self.control.bind_to_random_port(f"tcp://{host}")
        self.session_timeout = float(config.get("session_timeout", 30.0))
        self.daemon_gone = threading.Event()
        self.status = None  # PUSH socket to the daemon's status collector, once serving

    def describe(self) -> dict:
        devices = []
        for i in range(len(self.services)):
            device = self.backend.open_device(i)
            try:
                devices.append(device.properties())
            finally:
                device.close()
        description = {"ports": [s.port for s in self.services], "control_port": self.control_port,
                       "devices": devices, "backend": self.backend.name,
                       "peer_port": self.peer_receiver.port, "peer_token": self.peer_receiver.token}
        if all(s.lane_port is not None for s in self.services):
            description["lane_ports"] = [s.lane_port for s in self.services]
            if self.lane_secret is not None:
                description["lane_secret"] = self.lane_secret
        if self.peer_secret is not None:
            description["peer_secret"] = self.peer_secret
        return description

    def serve(self, token: str, client: dict) -> None:
        log.info("session for %s (pid %s, %s) started", client.get("host"), client.get("pid"),
                 client.get("program"))
        self.peer_receiver.start()
        for service in self.services:
            service.start(token)
        last_heard = time.monotonic()
        started = time.monotonic()
        self._open_status()
        next_report = started
        try:
            while not self.daemon_gone.is_set():
                if all(s.closed.is_set() for s in self.services):
                    log.info("session ended by the client")
                    return
                if self.control.poll(200, zmq.POLLIN):
                    peer, frame = self._recv_control()
                    if frame is not None:
                        last_heard = time.monotonic()
                        self.control.send_multipart([peer, protocol.pack({"op": "pong", "seq": frame.get("seq")})])
                silent = time.monotonic() - max(last_heard, started)
                if silent > self.session_timeout:
                    log.warning("client silent for %.0fs: ending its session", silent)
                    return
                if time.monotonic() >= next_report:
                    self._report(client, started)
                    next_report = time.monotonic() + protocol.STATUS_INTERVAL
        finally:
            for service in self.services:
                service.stop()
            self.windows.close()
            self.peer_receiver.stop()
            log.info("session resources freed")
            self._report(client, started, ended=True)
            if self.auth is not None:
                self.auth.stop()

    def _open_status(self) -> None:
        endpoint = self.config.get("status_endpoint")
        if endpoint:
            self.status = self.context.socket(zmq.PUSH)
            self.status.setsockopt(zmq.LINGER, 1000)  # the last report should reach the daemon
            self.status.setsockopt(zmq.SNDHWM, 4)
            if self.auth is not None:
                self.auth.as_own_client().apply(self.status)
            self.status.connect(endpoint)

    def _report(self, client: dict, started: float, ended: bool = False) -> None:
        """What this session holds and does, for `rcuda smi` (never blocks)."""
        if self.status is None:
            return
        report = {"pid": os.getpid(), "client": client, "age": time.monotonic() - started, "ended": ended,
                  "devices": [service.usage_report() for service in self.services]}
        try:
            self.status.send(protocol.pack(report), zmq.NOBLOCK)
        except zmq.Again:
            pass  # the daemon is busy or gone: the next report will do

    def _recv_control(self):
        parts = self.control.recv_multipart()
        if len(parts) != 2:
            return parts[0], None
        try:
            header = protocol.unpack(parts[1])
        except ProtocolError:
            return parts[0], None
        if header.get("op") != "ping" or header.get("token") != self.services[0].token:
            return parts[0], None
        return parts[0], header


def encode_line(message: dict) -> str:
    """The start-up line for the daemon: msgpack (device properties hold
    bytes, e.g. the uuid, which JSON cannot carry), base64 to stay one line."""
    return base64.b64encode(protocol.pack(message)).decode()


def decode_line(line: str) -> dict:
    return protocol.unpack(base64.b64decode(line))


def watch_stdin(worker: SessionWorker) -> None:
    """The daemon holds our stdin: when it closes, the daemon is gone."""
    sys.stdin.read()
    worker.daemon_gone.set()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    config = json.loads(argv[0])
    setup_server_logging(config.get("log_level"))
    try:
        worker = SessionWorker(config)
        description = worker.describe()
    except Exception as exc:  # reported to the daemon, which refuses to start
        log.exception("worker could not start")
        print(encode_line({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 1
    print(encode_line(description), flush=True)
    if worker.backend.name == "cupy":  # from now on, our stdout is the kernels' printf
        from rcuda.server.backends.cupy_backend import capture_device_output
        capture_device_output()
    line = sys.stdin.readline()
    if not line:
        return 0  # the daemon stopped before giving us a session
    assignment = json.loads(line)
    threading.Thread(target=watch_stdin, args=(worker,), daemon=True).start()
    ipc.exports().user = assignment.get("user")  # who may open this session's IPC exports
    worker.serve(assignment["token"], assignment.get("client", {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
