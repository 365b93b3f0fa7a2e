"""Server-to-server copies: cudaMemcpyPeer between GPUs of different servers.

The bytes go from the source server's worker straight to the destination
server's worker; the client only posts two ops, in one client-wide order
(see client/peer.py for why that order cannot deadlock):

    source GPU socket       peer_push {xfer, src, size, endpoint, token, ...}
    destination GPU socket  peer_wait {xfer, dst, size, source}

Each session worker has one more ROUTER socket, the *peer socket*, whose port
and token (`peer_token`, distinct from the session token) the client learns
in the hello reply.  A `PeerReceiver` thread owns it and files incoming
chunks in the worker's `Inbox` by transfer id, whether or not the destination
GPU has reached its `peer_wait` yet (early transfers are buffered), and acks
a transfer to its sender once all of it has arrived.

The destination GPU's thread, on reaching `peer_wait`, writes the chunks to
device memory as they come, so later ops on that GPU see the bytes.  It does
not time out by itself -- the source may be busy with a long kernel first,
which is no failure -- but it ends as soon as the transfer is aborted: by
the source worker's client when the source fails (`peer_failed` notice, then
`peer_abort`), by the client when the source server goes away, or when the
session ends.

The source GPU's thread, on reaching `peer_push` (so every earlier op on
that GPU is done), reads the range chunk by chunk and sends it, then waits
for the ack (bounded by the client's RCUDA_TIMEOUT).  A transfer between two
GPUs of the same worker is handed to the inbox in memory: it stays inside
the worker.
"""
from __future__ import annotations

import collections
import logging
import re
import secrets
import threading
import time

import zmq

from rcuda import protocol
from rcuda.errors import CudaError, ProtocolError, cudaError

log = logging.getLogger(__name__)

#: How often a waiting GPU thread checks whether its session is ending.
WAIT_SLICE = 0.2
#: Chunks a sender may have queued towards one destination before `send`
#: blocks: keeps memory bounded while the network stays busy.
SEND_HIGH_WATER = 8
#: The longest a client may ask a source worker to wait for a destination.
MAX_TIMEOUT = 3600.0
#: Completed transfer ids remembered, so that a late abort for one is ignored.
RECENT_TRANSFERS = 4096

_ENDPOINT_RE = re.compile(r"^tcp://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}$")


class _Transfer:
    """One incoming transfer: its chunks in arrival order."""

    __slots__ = ("chunks", "total", "arrived", "error", "waited")

    def __init__(self):
        self.chunks: collections.deque = collections.deque()  # memoryviews, in offset order
        self.total: int | None = None
        self.arrived = 0  # bytes delivered so far
        self.error: CudaError | None = None
        self.waited = False  # a GPU thread is consuming it


class Inbox:
    """Incoming transfers of one session worker, by transfer id.

    Filled by the receiver thread (and by this worker's own GPU threads for
    copies between its GPUs), drained by the destination GPU's thread.
    """

    def __init__(self):
        self._cond = threading.Condition()
        self._transfers: dict[int, _Transfer] = {}
        self._abandoned: set[int] = set()  # waits that failed: drop what still arrives
        self._recent: collections.deque = collections.deque(maxlen=RECENT_TRANSFERS)
        self._recent_set: set[int] = set()
        self._sources_gone: dict[str, tuple[int, str]] = {}  # source -> (last xfer, why)
        self.bytes_received = 0  # accounting, for logs and tests

    def deliver(self, xfer: int, offset: int, total: int, chunk: memoryview) -> tuple[bool, str | None]:
        """File a chunk.  Returns (transfer complete, problem or None); a
        problem means the chunk was refused."""
        length = len(chunk)
        with self._cond:
            if xfer in self._abandoned or xfer in self._recent_set:
                if offset + length >= total:
                    self._abandoned.discard(xfer)
                return offset + length >= total, None  # nobody wants it any more: drop quietly
            transfer = self._transfers.setdefault(xfer, _Transfer())
            if transfer.total is None:
                transfer.total = total
            if total != transfer.total or offset != transfer.arrived or offset + length > total:
                return False, (f"transfer {xfer}: chunk [{offset}, {offset + length}) of {total} bytes does not "
                               f"follow the {transfer.arrived} of {transfer.total} bytes received")
            if length == 0 and total != 0:
                return False, f"transfer {xfer}: empty chunk"
            transfer.chunks.append(chunk)
            transfer.arrived += length
            self.bytes_received += length
            self._cond.notify_all()
            return transfer.arrived == total, None

    def abort(self, xfer: int, message: str, status: int = cudaError.cudaErrorDevicesUnavailable) -> None:
        with self._cond:
            if xfer in self._recent_set or xfer in self._abandoned:
                return
            transfer = self._transfers.setdefault(xfer, _Transfer())
            if transfer.error is None:
                transfer.error = CudaError(status, message)
            self._cond.notify_all()

    def abort_source(self, source: str, upto: int, message: str) -> None:
        """Server `source` went away: every transfer from it numbered up to
        `upto` that has not fully arrived fails."""
        with self._cond:
            last, _ = self._sources_gone.get(source, (-1, ""))
            self._sources_gone[source] = (max(last, upto), message)
            self._cond.notify_all()

    def receive(self, xfer: int, source: str, size: int, stopping) -> "collections.abc.Iterator[memoryview]":
        """The chunks of transfer `xfer` (`size` bytes from `source`) as they
        arrive.  CudaError if it is aborted, or if the session ends first."""
        with self._cond:
            transfer = self._transfers.setdefault(xfer, _Transfer())
            transfer.waited = True
        consumed = 0
        try:
            while consumed < size:
                with self._cond:
                    while not transfer.chunks:
                        problem = self._problem(xfer, source, transfer, size)
                        if problem:
                            raise problem
                        if stopping():
                            raise CudaError(cudaError.cudaErrorDevicesUnavailable,
                                            f"session ended while waiting for peer copy {xfer} from {source}")
                        self._cond.wait(WAIT_SLICE)
                    if transfer.total != size:
                        raise CudaError(cudaError.cudaErrorInvalidValue,
                                        f"peer copy {xfer} from {source}: {transfer.total} bytes sent, "
                                        f"{size} expected")
                    chunk = transfer.chunks.popleft()
                consumed += len(chunk)
                yield chunk
        except BaseException:
            self._finish(xfer, abandoned=consumed < size)
            raise
        self._finish(xfer, abandoned=False)

    def _problem(self, xfer: int, source: str, transfer: _Transfer, size: int) -> CudaError | None:
        if transfer.error is not None:
            return transfer.error
        gone = self._sources_gone.get(source)
        if gone is not None and xfer <= gone[0] and transfer.arrived < size:
            return CudaError(cudaError.cudaErrorDevicesUnavailable,
                             f"peer copy {xfer}: source server {source} went away ({gone[1]})")
        return None

    def abandon(self, xfer: int) -> None:
        """A wait that will never consume `xfer` (it failed before starting)."""
        self._finish(xfer, abandoned=True)

    def _finish(self, xfer: int, abandoned: bool) -> None:
        with self._cond:
            transfer = self._transfers.pop(xfer, None)
            complete = transfer is not None and transfer.total is not None and transfer.arrived >= transfer.total
            if abandoned and not complete:
                self._abandoned.add(xfer)  # its remaining chunks are dropped as they come
            if len(self._recent) == self._recent.maxlen:
                self._recent_set.discard(self._recent[0])
            self._recent.append(xfer)
            self._recent_set.add(xfer)

    def pending(self) -> int:
        with self._cond:
            return len(self._transfers)


class PeerReceiver:
    """The worker's peer socket and the thread that files what arrives."""

    def __init__(self, context: zmq.Context, bind_host: str, inbox: Inbox):
        self.inbox = inbox
        self.token = secrets.token_hex(16)
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)  # never block a sender: chunks are wanted
        self.port = self.socket.bind_to_random_port(f"tcp://{bind_host}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rcuda peer receiver", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        else:
            self.socket.close(linger=0)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self.socket.poll(int(WAIT_SLICE * 1000), zmq.POLLIN):
                    self._handle(self.socket.recv_multipart(copy=False))
        except Exception:  # a bug must not go unnoticed: waits then end with the session
            log.exception("peer receiver stopped")
        finally:
            self.socket.close(linger=0)

    def _handle(self, parts: list) -> None:
        if len(parts) < 2:
            return
        sender, payload = parts[0].bytes, parts[2:]
        try:
            header = protocol.unpack(parts[1].buffer)
            op = protocol.check_header(header)
            if op not in protocol.PEER_SOCKET_OPS:
                raise ProtocolError(f"{op} is not a peer-socket message")
        except ProtocolError as exc:
            log.warning("peer socket: %s", exc)
            return
        xfer = header.get("xfer")
        if not secrets.compare_digest(header["token"].encode(), self.token.encode()):
            log.warning("peer socket: %s for transfer %s with a wrong token refused", op, xfer)
            self._ack(sender, xfer, cudaError.cudaErrorDevicesUnavailable,
                      "the destination refused the transfer: wrong peer token")
            return
        if op == "peer_abort":
            if xfer is None:
                self.inbox.abort_source(header["source"], header["upto"], header["msg"])
            else:
                self.inbox.abort(xfer, header["msg"], _status(header.get("err")))
            return
        problem = None
        if len(payload) != 1 or len(payload[0].buffer) > protocol.CHUNK_SIZE:
            problem = f"transfer {xfer}: a peer_data message carries one frame of at most {protocol.CHUNK_SIZE} bytes"
        elif header["offset"] < 0 or header["total"] < 0:
            problem = f"transfer {xfer}: negative offset or size"
        else:
            complete, problem = self.inbox.deliver(xfer, header["offset"], header["total"], payload[0].buffer)
            if complete:
                self._ack(sender, xfer, 0, "")
        if problem:
            log.warning("peer socket: %s", problem)
            self.inbox.abort(xfer, problem, cudaError.cudaErrorInvalidValue)
            self._ack(sender, xfer, cudaError.cudaErrorInvalidValue, problem)

    def _ack(self, sender: bytes, xfer, status: int, message: str) -> None:
        self.socket.send_multipart([sender, protocol.pack({"op": "peer_ack", "seq": 0, "xfer": xfer,
                                                           "err": int(status), "msg": message})])


class PeerOps:
    """The peer ops of one GPU's DeviceService, run in its thread.  Owns
    that thread's sockets towards other workers' peer sockets."""

    def __init__(self, service, context: zmq.Context, inbox: Inbox | None, own_token: str | None):
        self.service = service
        self.context = context
        self.inbox = inbox
        self.own_token = own_token
        self._senders: dict[str, zmq.Socket] = {}  # destination endpoint -> DEALER
        self.bytes_sent = 0

    def handlers(self) -> dict:
        return {"peer_push": self.push, "peer_wait": self.wait, "peer_access": self.access,
                "peer_data": self._wrong_socket, "peer_abort": self._wrong_socket}

    def close(self) -> None:
        for socket in self._senders.values():
            socket.close(linger=0)
        self._senders.clear()

    # ---------------------------------------------------------- destination

    def wait(self, header, payload):
        xfer, dst, size, source = header["xfer"], header["dst"], _non_negative(header, "size"), header["source"]
        if self.inbox is None:
            raise CudaError(cudaError.cudaErrorNotSupported, "this worker has no peer socket")
        device = self.service.device
        try:
            if self.service.sticky is not None:
                raise self.service.sticky
            device.check_range(dst, size, f"cudaMemcpyPeer destination (transfer {xfer} from {source})")
        except CudaError:
            self.inbox.abandon(xfer)
            raise
        if size == 0:
            return
        started, offset = time.monotonic(), 0
        for chunk in self.inbox.receive(xfer, source, size, self.service.stopping):
            device.memcpy_htod(dst + offset, chunk)
            offset += len(chunk)
        log.info("GPU%d: peer copy %d: received %d bytes from %s in %.3fs", self.service.index, xfer, size,
                 source, time.monotonic() - started)

    # ---------------------------------------------------------- source

    def push(self, header, payload):
        """Never raises for a failed transfer: the failure belongs to the copy,
        which the destination reports; the client is told to abort it there."""
        xfer = header["xfer"]
        try:
            self._push(header)
        except CudaError as exc:
            log.warning("GPU%d: peer copy %d to %s failed: %s", self.service.index, xfer, header["dest"], exc)
            self.service.notify({"notice": "peer_failed", "xfer": xfer, "dest": header["dest"],
                                 "err": int(exc.status), "msg": str(exc)})

    def _push(self, header) -> None:
        xfer, src, size, endpoint, dest = header["xfer"], header["src"], header["size"], header["endpoint"], \
            header["dest"]
        timeout = float(header["timeout"])
        if size < 0 or not 0 < timeout <= MAX_TIMEOUT:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"peer_push: bad size {size} or timeout {timeout}")
        if not _ENDPOINT_RE.match(endpoint):
            raise CudaError(cudaError.cudaErrorInvalidValue, f"peer_push: {endpoint!r} is not tcp://HOST:PORT")
        if self.service.sticky is not None:
            raise self.service.sticky
        device = self.service.device
        device.check_range(src, size, f"cudaMemcpyPeer source (transfer {xfer} to {dest})")
        if size == 0:
            return
        local = self.inbox is not None and self.own_token is not None and secrets.compare_digest(
            header["token"].encode(), self.own_token.encode())
        started = time.monotonic()
        if local:
            for offset in range(0, size, protocol.CHUNK_SIZE):
                chunk = _bytes(device.memcpy_dtoh(src + offset, min(protocol.CHUNK_SIZE, size - offset)))
                _, problem = self.inbox.deliver(xfer, offset, size, chunk)
                if problem:
                    raise CudaError(cudaError.cudaErrorInvalidValue, problem)
        else:
            self._send(device, xfer, src, size, endpoint, header["token"], dest, timeout)
        self.bytes_sent += size
        log.info("GPU%d: peer copy %d: sent %d bytes to %s (%s) in %.3fs", self.service.index, xfer, size, dest,
                 "inside this worker" if local else endpoint, time.monotonic() - started)

    def _send(self, device, xfer, src, size, endpoint, token, dest, timeout) -> None:
        socket = self._sender(endpoint, timeout)
        try:
            for offset in range(0, size, protocol.CHUNK_SIZE):
                chunk = _bytes(device.memcpy_dtoh(src + offset, min(protocol.CHUNK_SIZE, size - offset)))
                head = protocol.pack({"op": "peer_data", "seq": 0, "token": token, "xfer": xfer, "offset": offset,
                                      "total": size})
                socket.send_multipart([head, chunk], copy=False)
            self._await_ack(socket, xfer, dest, timeout)
        except zmq.Again:
            self._drop_sender(endpoint)
            raise CudaError(cudaError.cudaErrorDevicesUnavailable,
                            f"cannot send to server {dest} ({endpoint}) within {timeout:g}s: is it reachable "
                            f"from this server at the address the client uses?") from None
        except CudaError:
            self._drop_sender(endpoint)
            raise

    def _await_ack(self, socket, xfer: int, dest: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            if not socket.poll(int(left * 1000) + 1, zmq.POLLIN):
                break
            try:
                ack = protocol.unpack(socket.recv())
            except ProtocolError:
                continue
            if ack.get("xfer") != xfer:
                continue  # a late ack of an earlier transfer
            if ack.get("err"):
                raise CudaError(ack["err"], f"server {dest}: {ack.get('msg', '')}")
            return
        raise CudaError(cudaError.cudaErrorDevicesUnavailable,
                        f"server {dest} did not confirm transfer {xfer} within {timeout:g}s")

    def _sender(self, endpoint: str, timeout: float) -> zmq.Socket:
        socket = self._senders.get(endpoint)
        if socket is None:
            socket = self.context.socket(zmq.DEALER)
            socket.setsockopt(zmq.LINGER, 0)
            socket.setsockopt(zmq.IMMEDIATE, 1)  # queue only on a live connection: no silent loss
            socket.setsockopt(zmq.SNDHWM, SEND_HIGH_WATER)
            socket.connect(endpoint)
            self._senders[endpoint] = socket
        socket.setsockopt(zmq.SNDTIMEO, int(timeout * 1000))
        return socket

    def _drop_sender(self, endpoint: str) -> None:
        socket = self._senders.pop(endpoint, None)
        if socket is not None:
            socket.close(linger=0)

    # ---------------------------------------------------------- peer access

    def access(self, header, payload):
        peer = header["peer"]
        if peer == self.service.index or not 0 <= peer < self.service.backend.device_count():
            raise CudaError(cudaError.cudaErrorInvalidDevice, f"peer GPU {peer} of this server")
        self.service.device.set_peer_access(peer, bool(header["enable"]))

    def _wrong_socket(self, header, payload):
        raise ProtocolError(f"{header['op']} belongs on the worker's peer socket, not a GPU socket")


def _status(value) -> cudaError:
    """The cudaError an abort names, or cudaErrorDevicesUnavailable."""
    try:
        return cudaError(value) if isinstance(value, int) and value else cudaError.cudaErrorDevicesUnavailable
    except ValueError:
        return cudaError.cudaErrorDevicesUnavailable


def _bytes(view) -> memoryview:
    view = memoryview(view)
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _non_negative(header: dict, field: str) -> int:
    value = header[field]
    if value < 0:
        raise ProtocolError(f"{header.get('op')}: {field} must be a non-negative integer")
    return value
