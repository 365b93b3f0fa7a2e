"""CUDA IPC between sessions of one server: device memory one client
process exports (cudaIpcGetMemHandle) and another opens (cudaIpcOpenMemHandle).

Each session is a worker process of its own, so the memory crosses
processes as a file descriptor: the backend backs an exported allocation by
a shareable file (the sim: a memfd holding its bytes), and this worker
hands that descriptor to a worker that asks for it, over an abstract Unix
socket named for the worker, with SCM_RIGHTS.  What authorises a request is
the export's token, 128 random bits that only the exporting client learns
and puts in the handle it gives to the processes it chooses.  On a --auth
server a session's user is its client's key (the daemon's handshake proved
it): an export opens only in a session of the same user.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import struct
import threading

from rcuda.errors import CudaError, cudaError

log = logging.getLogger(__name__)

#: An abstract socket's name: this prefix, then the worker's name.
SOCKET_PREFIX = b"\0rcuda-ipc-"
#: How long an opening worker waits for the exporting one.
OPEN_TIMEOUT = 5.0
TOKEN_BYTES = 16
_REPLY = struct.Struct("<?Q")  # found, size
_USER = struct.Struct("<H")    # the length of the asking session's user, which follows


class IpcExports:
    """This worker's exported allocations, served to other workers."""

    def __init__(self):
        self.name = secrets.token_hex(TOKEN_BYTES)  # in every handle: where to ask
        self.user: str | None = None  # the session's --auth key (z85), whom its exports open for
        self._lock = threading.Lock()
        self._exports: dict[bytes, tuple[int, int]] = {}  # token -> (a descriptor of ours, size)
        self._listener: socket.socket | None = None
        self._stop = threading.Event()

    def export(self, fd: int, size: int) -> str:
        """Offer `fd` (duplicated: the caller keeps its own) of `size` bytes;
        its token, in hex."""
        with self._lock:
            if self._listener is None:
                self._listen()
            token = secrets.token_bytes(TOKEN_BYTES)
            self._exports[token] = (os.dup(fd), size)
        return token.hex()

    def withdraw(self, token: str) -> None:
        """The allocation is freed: no one may open it any more."""
        with self._lock:
            entry = self._exports.pop(bytes.fromhex(token), None)
        if entry is not None:
            os.close(entry[0])

    def owns(self, worker: str) -> bool:
        return worker == self.name

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            entries, self._exports = list(self._exports.values()), {}
            listener, self._listener = self._listener, None
        for fd, _ in entries:
            os.close(fd)
        if listener is not None:
            listener.close()

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(SOCKET_PREFIX + self.name.encode())
        listener.listen(16)
        listener.settimeout(0.2)  # to look at _stop now and then
        self._listener = listener
        threading.Thread(target=self._serve, args=(listener,), name="rcuda IPC exports", daemon=True).start()

    def _serve(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            with connection:
                try:
                    self._answer(connection)
                except OSError as exc:
                    log.warning("IPC: a request for an export failed: %s", exc)

    def _answer(self, connection: socket.socket) -> None:
        connection.settimeout(OPEN_TIMEOUT)
        token = _receive_exactly(connection, TOKEN_BYTES)
        (length,) = _USER.unpack(_receive_exactly(connection, _USER.size))
        user = _receive_exactly(connection, length).decode() or None
        with self._lock:
            entry = self._exports.get(token) if user == self.user else None  # another user: no such export
            fd = os.dup(entry[0]) if entry else None  # still ours, whatever happens to the export meanwhile
        if fd is None:
            connection.sendall(_REPLY.pack(False, 0))
            return
        try:
            socket.send_fds(connection, [_REPLY.pack(True, entry[1])], [fd])
        finally:
            os.close(fd)


def receive(worker: str, token: str) -> tuple[int, int]:
    """The descriptor and size of another worker's export (the caller closes
    it); cudaErrorInvalidResourceHandle when there is no such export."""
    try:
        key = bytes.fromhex(token)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(OPEN_TIMEOUT)
            connection.connect(SOCKET_PREFIX + worker.encode())
            user = (exports().user or "").encode()
            connection.sendall(key + _USER.pack(len(user)) + user)
            message, fds, _, _ = socket.recv_fds(connection, _REPLY.size, 1)
    except (OSError, ValueError) as exc:
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                        f"cudaIpcOpen*Handle: the exporting process's session is gone ({exc})") from None
    found, size = _REPLY.unpack(message) if len(message) == _REPLY.size else (False, 0)
    if not found or not fds:
        for fd in fds:
            os.close(fd)
        raise CudaError(cudaError.cudaErrorInvalidResourceHandle,
                        "cudaIpcOpen*Handle: no such export (freed or destroyed, another user's, or not this "
                        "server's)")
    return fds[0], size


def _receive_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise OSError("the requester went away")
        data += chunk
    return data


_exports: IpcExports | None = None


def exports() -> IpcExports:
    """This worker's exports (a worker serves one session)."""
    global _exports
    if _exports is None:
        _exports = IpcExports()
    return _exports
