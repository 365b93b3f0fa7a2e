"""A device's link: the one ordered connection its calls travel on.

Every remote device has exactly one link, of one of two kinds:

  * `LaneLink` (client/transport/lane.py), where the server offers lanes (no
    --auth): one TCP connection owned by the interposer's C side
    (native/link.c), which Python calls through cffi.  C's own fast paths
    (recorded launches, synchronous calls made without Python) use the same
    connection, so there is one byte stream and one order.
  * `SocketLink` (client/transport/zmq_socket.py), against a server with --auth:
    the device's CURVE-encrypted ZeroMQ socket, driven by a forwarding
    thread in Python; C records launches and Python ships them.

Both offer the same calls:

    call(header, frames=(), into=None) -> (reply, frames)
        a synchronous request; a reply payload of exactly len(into) bytes in
        one frame lands in `into` (the frames returned are then empty)
    post(header, frames=(), borrowed=False)
        an asynchronous request (no reply); `borrowed` frames are program
        memory that stays valid until sent (pinned memory), read when the
        message goes out
    post_awaited(header, frames, callback, into=None)
        asynchronous, but answered: callback(reply, frames, error) runs in
        the link's own thread, which must not block
    add_gate(gate)
        hold back everything sent from now on until gate.open() (a host
        function in a stream, an upload behind downloads still landing)

Replies come in any order (the server answers a wait when its work is done
and serves other requests meanwhile); each names its request's `seq`.  A
call waits without a fixed deadline (a long kernel is not a failure): it
fails only when the server has shown no sign of life for `timeout` seconds,
as the session's heartbeats tell (`heard`).
"""
from __future__ import annotations

import logging
import threading

from rcuda.errors import ServerTimeout, TransportError

log = logging.getLogger(__name__)


class Gate:
    """Holds back what is sent to a device after it, until `open()`.  It may
    be opened before or after it is added to a link."""

    __slots__ = ("_lock", "_opened", "_link", "id")

    def __init__(self):
        self._lock = threading.Lock()
        self._opened = False
        self._link = None
        self.id = None  # the link's name for it, once added

    @property
    def opened(self) -> bool:
        return self._opened

    def open(self) -> None:
        with self._lock:
            if self._opened:
                return
            self._opened = True
            link = self._link
        if link is not None:
            link.gate_opened(self)

    def attach(self, link, gate_id) -> bool:
        """Added to `link` as `gate_id`; False if it was opened already
        (the link then opens it at once)."""
        with self._lock:
            self._link, self.id = link, gate_id
            return not self._opened


class Link:
    """What both kinds of link do alike: keep their first failure and tell
    it to whoever asked, and hand the server's notices to `on_notice`."""

    label: str
    on_notice = None  # callable(header) for unsolicited server messages ({seq: null, notice: ...})
    transport = ""  # what its calls travel on (protocol.TRANSPORT_*), set by whoever made it

    def __init__(self):
        self._failure: TransportError | None = None
        self._on_failure: list = []

    def fail(self, error: TransportError) -> None:
        """The device cannot go on: every waiting and later call fails."""
        if self._failure is not None:
            return
        self._failure = error
        self._release_waiters(error)
        for callback in self._on_failure:
            callback(error)

    def _release_waiters(self, error: TransportError) -> None:
        """Make every call waiting on this link give up with `error`."""
        raise NotImplementedError

    def on_failure(self, callback) -> None:
        self._on_failure.append(callback)

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def _hand_notice(self, header: dict) -> None:
        if self.on_notice is None:
            log.warning("%s: unhandled notice %r", self.label, header.get("notice"))
            return
        try:
            self.on_notice(header)
        except Exception:  # noqa: BLE001 - a handler's bug must not stop the link's thread
            log.exception("%s: handling notice %r failed", self.label, header.get("notice"))


def server_silent(timeout: float) -> ServerTimeout:
    return ServerTimeout(f"no reply and no heartbeat for over {timeout:g}s (RCUDA_TIMEOUT)")


def failed_call(failure: TransportError, op: str, label: str) -> TransportError:
    """The link's failure as the error of call `op`, naming the device and server."""
    return type(failure)(f"{op} on {label}: {failure}")
