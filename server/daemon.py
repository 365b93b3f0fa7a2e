"""`rcuda server`: the daemon clients say hello to.

It does little by design: it answers `hello` by handing the client a session
worker (a process of its own, started ahead of need so the hello is quick),
and `info` with the GPUs it serves.  All GPU work happens in the workers, so
one session's crash, sticky error or hang cannot touch another's.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import zmq

from rcuda import __version__, protocol
from rcuda.auth import INTERNAL_DOMAIN, ServerAuth
from rcuda.errors import ProtocolError, cudaError
from rcuda.log import RateLimitedLog
from rcuda.server.status import StatusBoard
from rcuda.server.worker import decode_line

log = logging.getLogger(__name__)
bad_requests = RateLimitedLog(log)

WORKER_START_TIMEOUT = 120.0  # seconds; cupy's first CUDA context can take a while

#: How a worker process starts: as `python -m rcuda.server.worker`, but
#: without the current directory first on sys.path, where a folder named
#: `rcuda` (a clone of this repository, say) would hide the installed package.
WORKER_MAIN = ("import sys\n"
               "del sys.path[0]\n"
               "from rcuda.server.worker import main\n"
               "sys.exit(main())\n")


class WorkerError(RuntimeError):
    """A session worker could not start (bad plugin file, no GPU, ...)."""


@dataclass
class Worker:
    """A session worker process, spare or serving."""

    process: subprocess.Popen
    ready: threading.Event = field(default_factory=threading.Event)
    description: dict | None = None
    error: str | None = None
    client: dict | None = None
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def spawn(cls, config: dict) -> "Worker":
        process = subprocess.Popen([sys.executable, "-c", WORKER_MAIN, json.dumps(config)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                   env=worker_environment())
        worker = cls(process)
        threading.Thread(target=worker._read_description, daemon=True).start()
        return worker

    def _read_description(self) -> None:
        line = self.process.stdout.readline()
        try:
            message = decode_line(line) if line.strip() else {"error": "exited before it was ready"}
        except (ValueError, ProtocolError):
            message = {"error": f"unreadable start-up line {line!r}"}
        self.error = message.get("error")
        self.description = None if self.error else message
        self.ready.set()

    def assign(self, token: str, client: dict, user: str | None = None) -> None:
        """The worker serves `client`'s session; `user`: its --auth key (server/ipc.py)."""
        self.client = client
        self.process.stdin.write(json.dumps({"token": token, "client": client, "user": user}) + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()  # the worker ends its session and exits
            except OSError:
                pass
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


#: One BLAS thread per numpy call in a worker: a worker already runs one
#: thread per GPU, and machines run several servers; multi-threaded BLAS
#: then oversubscribes the cores.  The user's own setting wins.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def worker_environment() -> dict:
    env = dict(os.environ)
    for variable in BLAS_THREAD_VARIABLES:
        env.setdefault(variable, "1")
    return env


#: Seconds between the messages telling a queued hello where it stands.
PROGRESS_INTERVAL = 0.5


def parallel_worker_starts() -> int:
    """With a queue of hellos, how many workers start at once (more would only
    compete for the CPUs)."""
    return max(2, os.cpu_count() or 1)


class Daemon:
    def __init__(self, listen: str, worker_config: dict, spares: int = 1, max_sessions: int | None = None):
        self.listen = listen
        self.spares_wanted = max(1, spares)
        self.max_sessions = max_sessions  # sessions at once (with hellos waiting); None: no limit
        self.parallel_starts = parallel_worker_starts()
        self.context = zmq.Context()
        # --auth DIR: every socket a client reaches is a CURVE server (rcuda/auth.py).
        self.auth = ServerAuth(worker_config["auth"]) if worker_config.get("auth") else None
        if self.auth is not None:
            self.auth.start(self.context)
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        # A reply to a client that went away fails instead of vanishing: a
        # queued hello whose client gave up is then dropped, not given a worker.
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if self.auth is not None:
            self.auth.protect(self.socket)
        self.endpoint = ""
        self.spares: list[Worker] = []
        self.sessions: list[Worker] = []
        self.waiting: list[tuple[bytes, dict]] = []  # hellos waiting for a spare
        self.devices: list[dict] = []
        self.backend = ""
        self._stop = threading.Event()
        # Session workers report their usage here (server/status.py).
        self.status_socket = self.context.socket(zmq.PULL)
        self.status_socket.setsockopt(zmq.LINGER, 0)
        if self.auth is not None:  # only the server's own workers may report
            self.auth.protect(self.status_socket, INTERNAL_DOMAIN)
        status_port = self.status_socket.bind_to_random_port("tcp://127.0.0.1")
        self.worker_config = dict(worker_config, status_endpoint=f"tcp://127.0.0.1:{status_port}")
        self.board = StatusBoard()
        self._next_progress = 0.0

    def start(self) -> str:
        """Bind, start the first worker and wait until it is ready; returns the
        endpoint actually bound (port 0 picks a free one)."""
        self.socket.bind(self.listen)
        self.endpoint = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.worker_config.setdefault("identity", f"{socket.gethostname()} {self.endpoint}")
        first = Worker.spawn(self.worker_config)
        if not first.ready.wait(WORKER_START_TIMEOUT):
            first.process.kill()
            raise WorkerError(f"session worker did not start within {WORKER_START_TIMEOUT:.0f}s")
        if first.error:
            first.stop()
            raise WorkerError(first.error)
        self.devices = first.description["devices"]
        self.backend = first.description["backend"]
        self.spares.append(first)
        self._top_up_spares()
        return self.endpoint

    def stop(self) -> None:
        self._stop.set()

    def serve_forever(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        poller.register(self.status_socket, zmq.POLLIN)
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(100))
                if self.socket in ready:
                    frames = self.socket.recv_multipart(copy=False)
                    self._handle([frame.bytes for frame in frames], self._user_of(frames[-1]))
                while self.status_socket.poll(0):
                    self._take_report(self.status_socket.recv())
                self._reap()
                self._assign_waiting()
                self._tell_waiting()
        finally:
            if self.sessions:
                log.info("stopping: ending %d session(s), which frees what they hold", len(self.sessions))
            for worker in self.spares + self.sessions:
                worker.stop()
            self.socket.close(linger=0)
            self.status_socket.close(linger=0)
            if self.auth is not None:
                self.auth.stop()
            self.context.term()
            log.info("server stopped")

    def _take_report(self, frame: bytes) -> None:
        try:
            report = protocol.unpack(frame)
        except ProtocolError:
            return  # only our own workers can reach this loopback socket; ignore noise
        self.board.update(report)

    def status(self) -> dict:
        """What rcuda smi and the metrics show."""
        gpus, sessions = self.board.snapshot(self.devices)
        return {"devices": self.devices, "server": self._server_info(), "backend": self.backend, "gpus": gpus,
                "sessions": sessions}

    # ---------------------------------------------------------- requests

    def _user_of(self, frame: zmq.Frame) -> str | None:
        """Who sent `frame`, as --auth's CURVE handshake proved it: the z85
        form of the client's public key (None without --auth)."""
        if self.auth is None:
            return None
        try:
            return frame.get("User-Id")
        except zmq.ZMQError:
            return None

    def _handle(self, parts: list[bytes], user: str | None = None) -> None:
        if len(parts) != 2:
            return
        peer, header = parts[0], {}
        try:
            header = protocol.unpack(parts[1])
            op = protocol.check_header(header)
            header["user"] = user  # the key the handshake proved, whatever the client wrote there
            if header["version"] != protocol.PROTOCOL_VERSION:
                self._reply(peer, header, err=int(cudaError.cudaErrorDevicesUnavailable),
                            msg=f"protocol version {header['version']} is not this server's "
                                f"{protocol.PROTOCOL_VERSION}")
                return
            if op == "hello":
                if self.max_sessions is not None and len(self.sessions) + len(self.waiting) >= self.max_sessions:
                    self._reply(peer, header, err=int(cudaError.cudaErrorDevicesUnavailable),
                                msg=f"the server is at its limit of {self.max_sessions} sessions (--max-sessions): "
                                    f"try again when one has ended")
                    return
                self.waiting.append((peer, header))
                self._assign_waiting()
                self._top_up_spares()
            elif op == "info":
                self._reply(peer, header, devices=self.devices, server=self._server_info(),
                            backend=self.backend)
            elif op == "status":
                self._reply(peer, header, **self.status())
            else:
                raise ProtocolError(f"{op} is not a daemon request")
        except (ProtocolError, KeyError) as exc:
            bad_requests.warning("bad request: %s", exc)
            self._reply(peer, header, err=int(cudaError.cudaErrorInvalidValue), msg=str(exc))

    def _reply(self, peer: bytes, request: dict, **fields) -> bool:
        """Answer a request; False if its client is no longer connected."""
        reply = {"seq": request.get("seq"), "version": protocol.PROTOCOL_VERSION, "err": 0}
        reply.update(fields)
        try:
            self.socket.send_multipart([peer, protocol.pack(reply)], zmq.NOBLOCK)
        except zmq.ZMQError:  # EHOSTUNREACH (gone) or EAGAIN (not reading): the client has given up
            return False
        return True

    def _server_info(self) -> dict:
        return {"host": socket.gethostname(), "pid": os.getpid(), "version": __version__,
                "transport": protocol.transport("lane", self.auth is not None)}

    def _assign_waiting(self) -> None:
        while self.waiting:
            spare = next((w for w in self.spares if w.ready.is_set()), None)
            if spare is None:
                return
            self.spares.remove(spare)
            peer, header = self.waiting.pop(0)
            if spare.error or spare.process.poll() is not None:
                log.error("spare worker failed: %s", spare.error or "exited")
                self.waiting.insert(0, (peer, header))
                self._top_up_spares()
                continue
            token = secrets.token_hex(16)
            d = spare.description
            # The reply first: if its client has gone, the worker stays a spare.  (What the client
            # sends the worker before its assignment below waits in the worker's sockets.)
            if not self._reply(peer, header, token=token, ports=d["ports"], control_port=d["control_port"],
                               devices=d["devices"], server=self._server_info(), peer_port=d.get("peer_port"),
                               peer_token=d.get("peer_token"), peer_secret=d.get("peer_secret"),
                               lane_ports=d.get("lane_ports"), lane_secret=d.get("lane_secret")):
                log.info("the client of a queued hello went away before its worker was ready")
                self.spares.insert(0, spare)
                continue
            spare.assign(token, header["client"], header["user"])
            self.sessions.append(spare)
            client = header["client"]
            log.info("session for %s pid %s (%s) -> worker pid %d", client.get("host"), client.get("pid"),
                     client.get("program"), spare.process.pid)
            self._top_up_spares()

    def _tell_waiting(self) -> None:
        """Hellos queued for a worker hear their place in the queue now and
        then (when they asked to): a client keeps waiting while it moves up,
        so a burst of sessions does not run into RCUDA_TIMEOUT."""
        now = time.monotonic()
        if not self.waiting or now < self._next_progress:
            return
        self._next_progress = now + PROGRESS_INTERVAL
        gone = [(peer, header) for position, (peer, header) in enumerate(self.waiting)
                if header.get("progress") is True and not self._reply(peer, header, progress=True, queued=position)]
        for waiter in gone:
            self.waiting.remove(waiter)
        if gone:
            log.info("%d queued hello(s) dropped: their clients went away", len(gone))

    def _top_up_spares(self) -> None:
        """Keep `spares_wanted` workers started ahead of need, and while hellos
        wait, start more at once (up to `parallel_starts` starting)."""
        starting = sum(not w.ready.is_set() for w in self.spares)
        wanted = self.spares_wanted + min(len(self.waiting), self.parallel_starts)
        while len(self.spares) < wanted and (starting < self.parallel_starts or len(self.spares) < self.spares_wanted):
            self.spares.append(Worker.spawn(self.worker_config))
            starting += 1

    def _reap(self) -> None:
        for worker in list(self.sessions):
            if worker.process.poll() is not None:
                self.sessions.remove(worker)
                self.board.forget(worker.process.pid)
                log.info("worker pid %d ended (exit %s)", worker.process.pid, worker.process.returncode)
        for worker in list(self.spares):
            if worker.ready.is_set() and worker.error:
                log.error("spare worker failed to start: %s", worker.error)
                self.spares.remove(worker)
                worker.stop()
                time.sleep(0.5)  # don't spin on a persistent failure
                self._top_up_spares()
