"""Server-to-server copies: cudaMemcpyPeer between GPUs of different servers.

The bytes go from the source server's worker straight to the destination
server's worker; the client only posts two ops, in one client-wide order
(see client/transport/peer.py for why that order cannot deadlock):

    source GPU              peer_push {xfer, src, size, endpoint, token, ...}
    destination GPU         peer_wait {xfer, dst, size, source}

Each session worker has a *peer port*, whose port and token (`peer_token`,
distinct from the session token) the client learns in the hello reply: a
TCP listener whose connections are lanes (rcuda/lane.py's framing), sealed
under --auth as a GPU's lane is (rcuda/sealed.py), with keys made from the
session's *peer secret*.  A `PeerReceiver` serves each connection in a thread
of its own, files incoming chunks in the worker's `Inbox` by transfer id,
whether or not the destination GPU has reached its `peer_wait` yet (early
transfers are buffered), and acks a transfer to its sender once all of it
has arrived.

The destination GPU's thread, on reaching `peer_wait`, writes the chunks to
device memory as they come, in the copy's stream (the legacy one unless the
client names another), so later work there sees the bytes.  It does
not time out by itself -- the source may be busy with a long kernel first,
which is no failure -- but it ends as soon as the transfer is aborted: by
the source worker's client when the source fails (`peer_failed` notice, then
`peer_abort`), by the client when the source server goes away, or when the
session ends.

The source GPU's thread, on reaching `peer_push`, reads the range in the
copy's stream, after the work before it there (on a GPU, reaching a request
only means the earlier ones were issued), chunk by chunk with the next
chunks' reads in flight, sends each as it is read, then waits for the ack
(bounded by the client's RCUDA_TIMEOUT).

The client chooses the endpoint, so the source is careful where it sends: a
new connection must first pass the peer handshake (`peer_hello` answered
by `peer_welcome` from a peer port holding the token) before any of the
session's bytes go out.  With --auth each worker makes a fresh peer secret
for its session and hands it to its client in the (CURVE-encrypted) hello
reply; the client passes it in `peer_push` to the source worker (encrypted
again, on its sealed lane), which seals the connection with it: the
welcome opens only if the endpoint holds that session's secret, and no one
without it can read or alter the bytes.  A peer secret opens only that one
session's peer port, for the session's lifetime; servers need no keys of
each other.  A --auth server pushes only to peers that authenticate.  The destination bounds what it holds:
bytes that arrived and wait for the GPU (`Inbox.limit`: --peer-buffer, else
--memory-limit, else 1 GiB; beyond it the transfer fails with
cudaErrorMemoryAllocation) and the transfers open at once.  A transfer between two
GPUs of the same worker is handed to the inbox in memory: it stays inside
the worker.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import re
import secrets
import socket
import sys
import threading
import time

from rcuda import protocol, sealed
from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, ProtocolError, cudaError
from rcuda.lane import Lane, LaneClosed, dial, listen, set_timeouts
from rcuda.log import RateLimitedLog
from rcuda.wire import SEAL_KEY

log = logging.getLogger(__name__)
bad_messages = RateLimitedLog(log)  # what strangers send must not flood the log
failed_pushes = RateLimitedLog(log)  # nor what a client makes fail on purpose

#: How often a waiting GPU thread checks whether its session is ending.
WAIT_SLICE = 0.2
#: The longest a client may ask a source worker to wait for a destination.
MAX_TIMEOUT = 3600.0
#: Completed transfer ids remembered, so that a late abort for one is ignored.
RECENT_TRANSFERS = 4096
#: Bytes a session may hold in transit (arrived, not yet written to its GPU)
#: unless the server's --peer-buffer or --memory-limit says otherwise.
DEFAULT_BUFFER_LIMIT = 1 << 30
#: Transfers that may be open at once (arrived in part, or waited for):
#: each costs a little memory even when empty.
MAX_OPEN_TRANSFERS = 4096
#: Sources remembered as gone (peer_abort for a whole server).
MAX_SOURCES_GONE = 1024
#: Bytes of a push read from the GPU ahead of the piece being sent.
READ_AHEAD = 8 << 20
#: How long a push polls a piece's read before it sleeps until it is done.
READ_POLL_SECONDS = 0.0003
#: Connections a GPU thread keeps open to destinations' peer ports.
MAX_SENDERS = 16
#: Connections a peer port serves at once (a thread each).
MAX_PEER_CONNECTIONS = 64
#: How long a peer connection may take for its handshake, or to finish a
#: message it began.
PEER_READ_TIMEOUT = 5.0
#: cudaMemAccessFlags: none, read, read-write.
ACCESS_FLAGS = frozenset(ENUMS["cudaMemAccessFlags"].values())

_ENDPOINT_RE = re.compile(r"^tcp://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}$")


def buffer_limit(memory_limit: int | None, peer_buffer: int | None = None) -> int:
    """What one session may buffer of early-arriving peer copies: --peer-buffer,
    else the session's --memory-limit, else DEFAULT_BUFFER_LIMIT."""
    if peer_buffer:
        return peer_buffer
    return memory_limit if memory_limit else DEFAULT_BUFFER_LIMIT


class _Transfer:
    """One incoming transfer: its chunks in arrival order."""

    __slots__ = ("chunks", "total", "arrived", "error", "waited")

    def __init__(self):
        self.chunks: collections.deque = collections.deque()  # memoryviews, in offset order
        self.total: int | None = None
        self.arrived = 0  # bytes delivered so far
        self.error: CudaError | None = None
        self.waited = False  # a GPU thread is consuming it


class _RecentIds:
    """A set of transfer ids that forgets the oldest beyond `size`."""

    def __init__(self, size: int):
        self._order: collections.deque = collections.deque()
        self._ids: set[int] = set()
        self._size = size

    def add(self, xfer: int) -> None:
        if xfer in self._ids:
            return
        if len(self._order) >= self._size:
            self._ids.discard(self._order.popleft())
        self._order.append(xfer)
        self._ids.add(xfer)

    def discard(self, xfer: int) -> None:
        self._ids.discard(xfer)  # its place in _order goes when it is the oldest

    def __contains__(self, xfer) -> bool:
        return xfer in self._ids


class Inbox:
    """Incoming transfers of one session worker, by transfer id.

    Filled by the receiver thread (and by this worker's own GPU threads for
    copies between its GPUs), drained by the destination GPU's thread.
    Bounded: at most `limit` bytes wait to be written to a GPU (a transfer
    that would go beyond fails with cudaErrorMemoryAllocation), and at most
    MAX_OPEN_TRANSFERS transfers are open at once.
    """

    def __init__(self, limit: int = DEFAULT_BUFFER_LIMIT):
        self.limit = limit
        self._cond = threading.Condition()
        self._transfers: dict[int, _Transfer] = {}
        self._abandoned = _RecentIds(RECENT_TRANSFERS)  # waits that failed: drop what still arrives
        self._recent = _RecentIds(RECENT_TRANSFERS)
        self._sources_gone: collections.OrderedDict[str, tuple[int, str]] = collections.OrderedDict()
        self.bytes_received = 0  # accounting, for logs and tests
        self.buffered = 0  # bytes arrived and not yet taken by a GPU thread

    def deliver(self, xfer: int, offset: int, total: int, chunk: memoryview) -> tuple[bool, CudaError | None]:
        """File a chunk.  Returns (transfer complete, problem or None); a
        problem means the chunk was refused (and the transfer fails)."""
        length = len(chunk)
        with self._cond:
            if xfer in self._abandoned or xfer in self._recent:
                if offset + length >= total:
                    self._abandoned.discard(xfer)
                return offset + length >= total, None  # nobody wants it any more: drop quietly
            transfer = self._transfers.get(xfer)
            if transfer is None:
                if len(self._transfers) >= MAX_OPEN_TRANSFERS:
                    return False, CudaError(cudaError.cudaErrorMemoryAllocation,
                                            f"transfer {xfer}: {len(self._transfers)} transfers are already open "
                                            f"in this session")
                transfer = self._transfers[xfer] = _Transfer()
            if transfer.error is not None:  # failed already: its bytes are not wanted; the sender hears
                return False, transfer.error if offset + length >= total else None  # at its end
            if transfer.total is None:
                transfer.total = total
            if total != transfer.total or offset != transfer.arrived or offset + length > total:
                return False, self._refuse(transfer, f"transfer {xfer}: chunk [{offset}, {offset + length}) of "
                                                     f"{total} bytes does not follow the {transfer.arrived} of "
                                                     f"{transfer.total} bytes received")
            if length == 0 and total != 0:
                return False, self._refuse(transfer, f"transfer {xfer}: empty chunk")
            if self.buffered + length > self.limit:
                self._fail(transfer, CudaError(
                    cudaError.cudaErrorMemoryAllocation,
                    f"peer copy {xfer}: refused at {offset + length} of {total} bytes: more bytes arrived before "
                    f"the destination GPU could take them than its session may hold in transit "
                    f"({self.limit} bytes: the server's --peer-buffer, else --memory-limit); synchronise the "
                    f"destination GPU before a large peer copy"))
                return False, transfer.error
            transfer.chunks.append(chunk)
            transfer.arrived += length
            self.buffered += length
            self.bytes_received += length
            self._cond.notify_all()
            return transfer.arrived == total, None

    def _refuse(self, transfer: _Transfer, message: str) -> CudaError:
        self._fail(transfer, CudaError(cudaError.cudaErrorInvalidValue, message))
        return transfer.error

    def _fail(self, transfer: _Transfer, error: CudaError) -> None:
        """(Under the lock.) The transfer fails; what it buffered is freed."""
        if transfer.error is None:
            transfer.error = error
        self.buffered -= sum(len(c) for c in transfer.chunks)
        transfer.chunks.clear()
        self._cond.notify_all()

    def abort(self, xfer: int, message: str, status: int = cudaError.cudaErrorDevicesUnavailable) -> None:
        with self._cond:
            if xfer in self._recent or xfer in self._abandoned:
                return
            transfer = self._transfers.get(xfer)
            if transfer is None:
                if len(self._transfers) >= MAX_OPEN_TRANSFERS:
                    return  # nothing of it is here; a wait for it will hear from its source's failure
                transfer = self._transfers[xfer] = _Transfer()
            self._fail(transfer, CudaError(status, message))

    def abort_source(self, source: str, upto: int, message: str) -> None:
        """Server `source` went away: every transfer from it numbered up to
        `upto` that has not fully arrived fails."""
        with self._cond:
            last, _ = self._sources_gone.pop(source, (-1, ""))
            self._sources_gone[source] = (max(last, upto), message)
            while len(self._sources_gone) > MAX_SOURCES_GONE:
                self._sources_gone.popitem(last=False)
            self._cond.notify_all()

    def receive(self, xfer: int, source: str, size: int, stopping) -> "collections.abc.Iterator[memoryview]":
        """The chunks of transfer `xfer` (`size` bytes from `source`) as they
        arrive.  CudaError if it is aborted, or if the session ends first."""
        with self._cond:
            transfer = self._transfers.get(xfer)
            if transfer is None:
                transfer = self._transfers[xfer] = _Transfer()  # a wait is always let in: it was posted
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
                    self.buffered -= len(chunk)
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
            if transfer is not None:
                self.buffered -= sum(len(c) for c in transfer.chunks)
                transfer.chunks.clear()
            complete = transfer is not None and transfer.total is not None and transfer.arrived >= transfer.total
            if abandoned and not complete:
                self._abandoned.add(xfer)  # its remaining chunks are dropped as they come
            self._recent.add(xfer)

    def pending(self) -> int:
        with self._cond:
            return len(self._transfers)


class PeerReceiver:
    """The worker's peer port: a TCP listener whose connections are lanes
    (rcuda/lane.py framing; sealed with the session's peer secret under
    --auth, rcuda/sealed.py), each read by a thread of its own, which files
    what arrives in the inbox and answers on that connection.  A
    connection that stalls or breaks costs only its own thread."""

    def __init__(self, bind_host: str, inbox: Inbox, secret: bytes | None = None):
        self.inbox = inbox
        self.token = secrets.token_hex(16)
        self.secret = secret
        self._listener = listen(bind_host, backlog=16)
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept_loop, name="rcuda peer port", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            for connection in self._connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)  # wakes its thread's read
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._listener.close()

    def _accept_loop(self) -> None:
        self._listener.settimeout(WAIT_SLICE)
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                if len(self._connections) >= MAX_PEER_CONNECTIONS:
                    bad_messages.warning("peer port: %d connections open, one more refused", MAX_PEER_CONNECTIONS)
                    connection.close()
                    continue
                self._connections.add(connection)
            threading.Thread(target=self._serve, args=(connection,), name="rcuda peer connection",
                             daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        """One connection, until it closes, breaks or the session ends.  Its
        first message must carry the session's peer token (a peer_hello
        from a source, a peer_abort from the client), within
        PEER_READ_TIMEOUT: strangers do not get to hold a thread."""
        try:
            set_timeouts(connection, PEER_READ_TIMEOUT, PEER_READ_TIMEOUT)
            seal = sealed.server_handshake(connection, self.secret) if self.secret is not None else None
            lane = Lane(connection, max_payload=protocol.CHUNK_SIZE, seal=seal)
            authorised = False
            while not self._stop.is_set():
                try:
                    head, frames = lane.receive_raw()
                except (BlockingIOError, TimeoutError):
                    if not authorised:
                        raise ProtocolError(f"no message with the session's peer token within "
                                            f"{PEER_READ_TIMEOUT:g}s") from None
                    continue  # an idle source, keeping its connection for its next copy
                try:
                    header = protocol.unpack(head)
                    op = protocol.check_header(header)
                    if op not in protocol.PEER_SOCKET_OPS:
                        raise ProtocolError(f"{op} is not a peer-port message")
                except ProtocolError:
                    if not authorised:
                        raise
                    bad_messages.warning("peer port: %s", sys.exc_info()[1])
                    continue
                if self._handle(lane, header, op, frames):
                    authorised = True
                elif not authorised:
                    return  # refused, and told so
        except LaneClosed as exc:
            if isinstance(exc, sealed.SealBroken):
                bad_messages.warning("peer port: connection closed: %s", exc)
        except (OSError, ProtocolError) as exc:
            bad_messages.warning("peer port: connection closed: %s", exc)
        finally:
            with self._lock:
                self._connections.discard(connection)
            connection.close()

    def _handle(self, lane: Lane, header: dict, op: str, payload: list) -> bool:
        """One message; False if its token is not the session's."""
        xfer = header.get("xfer")
        if not secrets.compare_digest(header["token"].encode(), self.token.encode()):
            bad_messages.warning("peer port: %s for transfer %s with a wrong token refused", op, xfer)
            self._answer(lane, op, xfer, cudaError.cudaErrorDevicesUnavailable,
                         "the destination refused the transfer: wrong peer token")
            return False
        if op == "peer_hello":
            self._answer(lane, op, None, 0, "")
            return True
        if op == "peer_abort":
            if xfer is None:
                self.inbox.abort_source(header["source"], header["upto"], header["msg"])
            else:
                self.inbox.abort(xfer, header["msg"], _status(header.get("err")))
            return True
        problem = None
        if len(payload) != 1 or len(payload[0].buffer) > protocol.CHUNK_SIZE:
            problem = CudaError(cudaError.cudaErrorInvalidValue, f"transfer {xfer}: a peer_data message carries "
                                                                 f"one frame of at most {protocol.CHUNK_SIZE} bytes")
        elif header["offset"] < 0 or header["total"] < 0:
            problem = CudaError(cudaError.cudaErrorInvalidValue, f"transfer {xfer}: negative offset or size")
        else:
            complete, problem = self.inbox.deliver(xfer, header["offset"], header["total"], payload[0].buffer)
            if complete:
                self._answer(lane, op, xfer, 0, "")
        if problem:
            bad_messages.warning("peer port: %s", problem.message)
            self.inbox.abort(xfer, problem.message, problem.status)
            self._answer(lane, op, xfer, problem.status, problem.message)
        return True

    @staticmethod
    def _answer(lane: Lane, op: str, xfer, status: int, message: str) -> None:
        """peer_welcome to a peer_hello, peer_ack to anything else."""
        reply = "peer_welcome" if op == "peer_hello" else "peer_ack"
        lane.send({"op": reply, "seq": 0, "xfer": xfer, "err": int(status), "msg": message})


class PeerOps:
    """The peer ops of one GPU's DeviceService, run in its thread.  Owns
    that thread's sockets towards other workers' peer sockets."""

    def __init__(self, service, inbox: Inbox | None, own_token: str | None):
        self.service = service
        self.inbox = inbox
        self.own_token = own_token
        #: (endpoint, token, peer secret) -> a lane that passed the peer handshake
        self._senders: collections.OrderedDict[tuple, Lane] = collections.OrderedDict()
        self.bytes_sent = 0
        #: With --auth: push only to peers that authenticate (peer_secret).
        self.require_sealed = False

    def handlers(self) -> dict:
        return {"peer_push": self.push, "peer_wait": self.wait, "peer_access": self.access, "mem_access": self.allocation_access,
                "peer_data": self._wrong_socket, "peer_abort": self._wrong_socket, "peer_hello": self._wrong_socket}

    def close(self) -> None:
        for lane in self._senders.values():
            lane.close()
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
            stream = self._stream(header)
            device.check_range(dst, size, f"cudaMemcpyPeer destination (transfer {xfer} from {source})")
        except CudaError:
            self.inbox.abandon(xfer)
            raise
        if size == 0:
            return
        started, offset = time.monotonic(), 0
        for chunk in self.inbox.receive(xfer, source, size, self.service.stopping):
            # In the copy's stream: after the work before it there (which may
            # still read the range), before the work after it.
            device.memcpy_htod(dst + offset, chunk, stream)
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
            failed_pushes.warning("GPU%d: peer copy %d to %s failed: %s", self.service.index, xfer, header["dest"],
                                  exc)
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
        stream = self._stream(header)
        device.check_range(src, size, f"cudaMemcpyPeer source (transfer {xfer} to {dest})")
        if size == 0:
            return
        local = self.inbox is not None and self.own_token is not None and secrets.compare_digest(
            header["token"].encode(), self.own_token.encode())
        started = time.monotonic()
        chunks = _read(device, src, size, stream)
        if local:
            for offset, chunk in chunks:
                # A copy: the inbox keeps it, and a view may be device memory (the sim's).
                _, problem = self.inbox.deliver(xfer, offset, size, bytes(chunk))
                if problem:
                    raise problem
        else:
            secret = self._secret(header)
            self._send(chunks, xfer, size, endpoint, header["token"], secret, dest, timeout)
        self.bytes_sent += size
        log.info("GPU%d: peer copy %d: sent %d bytes to %s (%s) in %.3fs", self.service.index, xfer, size, dest,
                 "inside this worker" if local else endpoint, time.monotonic() - started)

    def _secret(self, header) -> bytes | None:
        """The destination session's peer secret, which seals the connection
        (rcuda/sealed.py), or None for a plain one."""
        secret = header.get("peer_secret")
        if secret is None:
            if self.require_sealed:
                raise CudaError(cudaError.cudaErrorNotPermitted,
                                f"peer copy to {header['dest']}: this server runs with --auth and sends peer copies "
                                f"only to servers that authenticate; the destination has no key (run it with "
                                f"--auth too, or copy through the client: RCUDA_PEER_COPY=client)")
            return None
        if not isinstance(secret, bytes) or len(secret) != SEAL_KEY:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"peer_push: peer_secret must be {SEAL_KEY} bytes")
        return secret

    def _send(self, chunks, xfer, size, endpoint, token, secret, dest, timeout) -> None:
        key = (endpoint, token, secret)
        lane = self._sender(key, dest, timeout)
        try:
            acknowledged = False
            for offset, chunk in chunks:
                lane.send({"op": "peer_data", "seq": 0, "token": token, "xfer": xfer, "offset": offset,
                           "total": size}, [chunk])  # returns once the kernel holds the bytes
                while lane.readable():  # a refusal stops us early
                    acknowledged |= self._read_ack(lane, xfer, dest)
            if not acknowledged:
                self._await_ack(lane, xfer, dest, timeout)
        except CudaError:
            self._drop_sender(key)
            raise
        except (OSError, ProtocolError) as exc:
            self._drop_sender(key)
            raise CudaError(cudaError.cudaErrorDevicesUnavailable,
                            f"peer copy {xfer} to server {dest} ({endpoint}) broke off: {exc}") from None

    @staticmethod
    def _read_ack(lane: Lane, xfer: int, dest: str) -> bool:
        """One message from the destination: True if it confirms `xfer`,
        CudaError if it refuses it; False for anything else (a late ack)."""
        ack, _ = lane.receive()
        if ack.get("xfer") != xfer or ack.get("op") != "peer_ack":
            return False
        if ack.get("err"):
            raise CudaError(_status(ack["err"]), f"server {dest}: {ack.get('msg', '')}")
        return True

    def _await_ack(self, lane: Lane, xfer: int, dest: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            set_timeouts(lane.sock, left, timeout)
            try:
                if self._read_ack(lane, xfer, dest):
                    return
            except (BlockingIOError, TimeoutError):
                break
        raise CudaError(cudaError.cudaErrorDevicesUnavailable,
                        f"server {dest} did not confirm transfer {xfer} within {timeout:g}s")

    def _sender(self, key: tuple, dest: str, timeout: float) -> Lane:
        """A connection to a destination's peer port.  A new one must pass
        the peer handshake first: the endpoint answers `peer_hello` with the
        token as an rcuda peer port (sealed: with the records only the
        holder of the destination session's peer secret can make) before
        any of the session's bytes go there, so a client cannot make this
        server pour data into some other service."""
        lane = self._senders.get(key)
        if lane is not None:
            self._senders.move_to_end(key)
            set_timeouts(lane.sock, timeout, timeout)
            return lane
        endpoint, token, secret = key
        host, port = _host_port(endpoint)
        try:
            lane = dial(host, port, timeout, secret)
        except OSError as exc:
            raise CudaError(cudaError.cudaErrorDevicesUnavailable,
                            f"cannot send to server {dest} ({endpoint}) within {timeout:g}s: is it reachable from "
                            f"this server at the address the client uses? ({exc})") from None
        try:
            lane.send({"op": "peer_hello", "seq": 0, "token": token})
            welcome, _ = lane.receive()
        except sealed.SealBroken:
            lane.close()
            raise CudaError(cudaError.cudaErrorDevicesUnavailable,
                            f"peer copy to server {dest} ({endpoint}): its answer was not sealed with the "
                            f"destination session's peer secret: not that session's peer port") from None
        except (OSError, ProtocolError):
            lane.close()
            raise CudaError(cudaError.cudaErrorDevicesUnavailable,
                            f"{endpoint} did not answer the rcuda peer handshake within {timeout:g}s: it is not "
                            f"the peer port of server {dest}'s session") from None
        if welcome.get("op") != "peer_welcome" or welcome.get("err"):
            lane.close()
            status = _status(welcome.get("err")) if welcome.get("op") == "peer_welcome" else \
                cudaError.cudaErrorDevicesUnavailable
            raise CudaError(status, f"server {dest} ({endpoint}): {welcome.get('msg') or 'no peer_welcome'}")
        self._senders[key] = lane
        while len(self._senders) > MAX_SENDERS:
            self._senders.popitem(last=False)[1].close()
        return lane

    def _drop_sender(self, key: tuple) -> None:
        lane = self._senders.pop(key, None)
        if lane is not None:
            lane.close()

    # ---------------------------------------------------------- peer access

    def links(self) -> list[dict]:
        """Not a cudaDeviceProp field: for each GPU of this server, by its
        index here, the cudaDeviceGetP2PAttribute values of the link from
        this GPU to it ({} for this GPU itself), for the client."""
        device = self.service.device
        return [device.peer_attributes(j) if j != self.service.index else {}
                for j in range(self.service.backend.device_count())]

    def access(self, header, payload):
        self.service.device.set_peer_access(self._peer(header), bool(header["enable"]))

    def allocation_access(self, header, payload):
        flags = header["flags"]
        if flags not in ACCESS_FLAGS:
            raise CudaError(cudaError.cudaErrorInvalidValue, f"mem_access: access flags {flags}")
        self.service.device.set_allocation_access(header["ptr"], self._peer(header), flags)

    def _peer(self, header) -> int:
        peer = header["peer"]
        if peer == self.service.index or not 0 <= peer < self.service.backend.device_count():
            raise CudaError(cudaError.cudaErrorInvalidDevice, f"peer GPU {peer} of this server")
        return peer

    def _stream(self, header) -> int:
        """The copy's stream on this GPU (checked), where the client gives
        one (cudaMemcpyPeerAsync in a stream of this GPU); else the legacy stream."""
        return self.service.stream_id(header) if "stream" in header else 0

    def _wrong_socket(self, header, payload):
        raise ProtocolError(f"{header['op']} belongs on the worker's peer port, not a GPU socket")


def _status(value) -> cudaError:
    """The cudaError an abort names, or cudaErrorDevicesUnavailable."""
    try:
        return cudaError(value) if isinstance(value, int) and value else cudaError.cudaErrorDevicesUnavailable
    except ValueError:
        return cudaError.cudaErrorDevicesUnavailable


def _host_port(endpoint: str) -> tuple[str, int]:
    """(host, port) of a checked tcp://HOST:PORT endpoint."""
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    return host.strip("[]"), int(port)


def _read(device, src: int, size: int, stream: int):
    """(offset, bytes) of [src, src+size) in CHUNK_SIZE pieces, as the work
    before them in `stream` leaves them.  The pieces' copies go into the
    stream ahead of their sending (READ_AHEAD bytes at most), so the GPU
    reads the next while this thread sends one.  Each is waited for before
    it is yielded, so what the GPU is given after the push comes after the
    whole read."""
    reads: collections.deque = collections.deque()  # (offset, view, Completion), in order
    issued = 0
    try:
        while issued < size or reads:
            while issued < size and len(reads) * protocol.CHUNK_SIZE < READ_AHEAD:
                length = min(protocol.CHUNK_SIZE, size - issued)
                reads.append((issued, *device.memcpy_dtoh(src + issued, length, stream)))
                issued += length
            offset, data, done = reads[0]
            _finish(done)
            yield offset, _bytes(data)
            reads.popleft()
            done.release()
    finally:
        for _, _, done in reads:
            done.release()


def _finish(done) -> None:
    """Wait for a read, polling it for a moment first: a blocking wait sleeps
    until the GPU's interrupt wakes the thread, which may take longer than
    the copy of a piece (the GPU threads poll their Completions so too)."""
    give_up = time.perf_counter() + READ_POLL_SECONDS
    while not done.ready():
        if time.perf_counter() > give_up:
            done.wait()
            return


def _bytes(view) -> memoryview:
    view = memoryview(view)
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def _non_negative(header: dict, field: str) -> int:
    value = header[field]
    if value < 0:
        raise ProtocolError(f"{header.get('op')}: {field} must be a non-negative integer")
    return value
