"""Who may use a device's lane, and the two message counts that keep its
order with the ZeroMQ socket (rcuda/lane.py).

The Python client's channel (client/channel.py) and, inside the
interposer, C (native/sync_fast_path.c: small synchronous calls made
without Python) both send on the lane.  They share, per device:

  * the lane's lock: whoever holds it talks on the lane;
  * the counts of messages sent on the socket and on the lane, moved in one
    step per message, so that a lane message's `after` and a socket
    message's `lane_after` always describe one order;
  * the channel's word on whether C may call now (`set_open`): no reply is
    awaited on the socket, nothing is queued there, no gate holds it.

`LaneShare` keeps them in Python, for a client with no C side (the runtime
used from Python, tests).  `NativeLaneShare` (client/fast_path.py) keeps
them in C, where the interposer's calls read them without the GIL.
"""
from __future__ import annotations

import threading


class LaneShare:
    """The lane's lock and message counts, with no C caller beside Python."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = threading.Lock()
        self._socket_sent = 0  # messages sent on the socket: a lane message's `after`
        self._lane_sent = 0    # messages sent on the lane: a socket message's `lane_after`

    # The lock, as threading.Lock's.
    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def socket_message(self) -> int:
        """One message goes out on the socket: its `lane_after`."""
        with self._counts:
            self._socket_sent += 1
            return self._lane_sent

    def lane_messages(self, count: int) -> int:
        """`count` messages go out on the lane (0: none, only asking): their `after`."""
        with self._counts:
            self._lane_sent += count
            return self._socket_sent

    def attach(self, fd: int, spin_seconds: float) -> None:
        """The lane's descriptor (-1: none now), under the lock."""

    def set_open(self, open_: bool) -> None:
        """Whether C may make a synchronous call on the lane now."""
