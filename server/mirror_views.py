"""What the client has of each mirror (mapped and managed memory,
client/memory/mapped.py), so that a download after a synchronisation sends
only what the device changed.

A mirror's host copy holds what the server last sent it or received from
it.  The server keeps a copy of that view (its *shadow*); at a `mirror_dtoh`
it compares the device copy, CHUNK by CHUNK, with the shadow and sends the
chunks that differ (all of it the first time).  Chunks the host sends
(`mirror_htod`, `mirror_zero`) become unknown and go back at the next
download: the device may have changed other bytes of them.  Freeing the
memory forgets its views.  A 1 GiB managed allocation of which a kernel
changed 1 MiB then costs a comparison on the server's side of the link and
about 1 MiB on the network, not 1 GiB.

A mirror is learnt (copied into its shadow) at its second download, so a
range downloaded once costs nothing more.  A download that finds nearly
every chunk's first bytes changed (a kernel rewriting all of it) sends it
whole without comparing or copying, and the next few are sent whole too
(more of them each time it happens again), before it is learnt again, in
case the program's pattern changed.  Mirrors under MIN_BYTES are always
sent whole.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

_memcmp = ctypes.CDLL(None).memcmp
_memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]

#: The unit of change.
CHUNK = 256 << 10
#: Smaller mirrors are sent whole.
MIN_BYTES = 4 << 20
#: A download that finds at least this share of the chunks' first bytes changed is sent whole.
MOSTLY = 0.9
#: The most downloads sent whole after ones that found everything changed.
MAX_COOLDOWN = 15


@dataclass
class View:
    size: int
    shadow: np.ndarray | None = None  # uint8: what the client has (where `known`), once learnt
    known: np.ndarray | None = None   # per chunk: False where the host sent bytes since
    streak: int = 0       # downloads in a row that found it (nearly) all changed
    cooldown: int = 0     # downloads still to send whole before it is learnt again
    fresh: bool = False   # the shadow is the client's view


class MirrorViews:
    def __init__(self):
        self._views: dict[int, View] = {}  # the mirror's device address -> view

    def changed_runs(self, src: int, data, size: int) -> list[tuple[int, int]] | None:
        """The (offset, length) runs of the mirror at `src` whose bytes
        (`data`, the device copy now) differ from the client's view; None:
        send it all.  Either way the client has `data` once it is sent."""
        view = self._views.get(src)
        if size < MIN_BYTES:
            return None
        if view is None or view.size != size:
            self._views[src] = View(size)  # learnt at its next download
            return None
        current = np.frombuffer(data, np.uint8)
        if view.cooldown:
            view.cooldown -= 1
            return None
        if not view.fresh:
            self._learn(view, current)
            return None
        whole = size // CHUNK * CHUNK
        heads = (current[:whole].reshape(-1, CHUNK)[:, :64] != view.shadow[:whole].reshape(-1, CHUNK)[:, :64])
        if heads.any(axis=1).mean() >= MOSTLY:  # rewritten all over: comparing would only cost
            view.streak += 1
            view.cooldown = min(2 ** view.streak - 1, MAX_COOLDOWN)
            view.fresh = False
            return None
        view.streak = 0
        changed = ~view.known
        now, had = current.ctypes.data, view.shadow.ctypes.data
        for i in np.flatnonzero(view.known):  # memcmp: several times numpy's speed, and no temporaries
            offset = int(i) * CHUNK
            changed[i] = _memcmp(now + offset, had + offset, min(CHUNK, size - offset)) != 0
        edges = np.flatnonzero(np.diff(np.concatenate(([False], changed, [False])).astype(np.int8)))
        runs = [(int(a) * CHUNK, min(int(b) * CHUNK, size) - int(a) * CHUNK) for a, b in zip(edges[::2], edges[1::2])]
        for offset, length in runs:
            view.shadow[offset:offset + length] = current[offset:offset + length]
        view.known[:] = True
        return None if changed.all() else runs

    @staticmethod
    def _learn(view: View, current: np.ndarray) -> None:
        if view.shadow is None:
            view.shadow = np.empty(view.size, np.uint8)
            view.known = np.ones(-(-view.size // CHUNK), bool)
        np.copyto(view.shadow, current)
        view.known[:] = True
        view.fresh = True

    def host_sent(self, dst: int, size: int) -> None:
        """The host wrote [dst, dst + size) of the device copy."""
        for src, view in self._views.items():
            if view.known is not None and src < dst + size and dst < src + view.size:
                first = max(dst - src, 0) // CHUNK
                last = -(-(min(dst + size, src + view.size) - src) // CHUNK)
                view.known[first:last] = False

    def forget(self, start: int, size: int) -> None:
        """[start, start + size) is freed (or unmapped): its views go."""
        for src in [s for s in self._views if start <= s < start + max(size, 1)]:
            del self._views[src]

    def clear(self) -> None:
        self._views.clear()
