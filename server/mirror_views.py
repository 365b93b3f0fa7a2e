"""What the client has of each mirror (mapped and managed memory,
client/memory/mapped.py), so that a download after a synchronisation sends
only what the device changed.

A mirror's host copy holds what the server last sent it or received from
it.  The server keeps a copy of that view (its *shadow*), CHUNK by CHUNK;
at a `mirror_dtoh` of a mirror or of a part of it (managed memory is
downloaded where the host touches it, in chunk-aligned parts) it compares
the device copy with the shadow and sends the chunks that differ (all of
it the first time).  Chunks the host sends (`mirror_htod`, `mirror_zero`)
become unknown and go back at the next download: the device may have
changed other bytes of them.  Freeing the memory forgets its views.  A
1 GiB managed allocation of which a kernel changed 1 MiB then costs a
comparison on the server's side of the link and about 1 MiB on the
network, not 1 GiB; where the host reads only that MiB, the comparison is
of that MiB.

A chunk is learnt (copied into the shadow) at its second download, so a
range downloaded once costs nothing more.  A download that finds nearly
every chunk's first bytes changed (a kernel rewriting all of it) is sent
whole without comparing or copying, and the next few are sent whole too
(more of them each time it happens again; a mirror's worth of parts counts
as one), before it is learnt again, in case the program's pattern changed.  Mirrors under MIN_BYTES are always
sent whole.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from rcuda.wire import MIRROR_CHUNK

_memcmp = ctypes.CDLL(None).memcmp
_memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]

#: The unit of change.
CHUNK = MIRROR_CHUNK
#: Smaller mirrors are sent whole.
MIN_BYTES = 4 << 20
#: A download that finds at least this share of the chunks' first bytes changed is sent whole.
MOSTLY = 0.9
#: The most downloads sent whole after ones that found everything changed.
MAX_COOLDOWN = 15


@dataclass
class View:
    size: int
    seen: np.ndarray      # per chunk: downloaded before (learnt at the next download)
    known: np.ndarray     # per chunk: the shadow holds what the client has
    shadow: np.ndarray | None = None  # uint8, made at the first chunk learnt
    streak: int = 0       # downloads in a row that found it (nearly) all changed
    cooldown: int = 0     # bytes still to send whole before it is learnt again (so many times its size)

    @classmethod
    def of(cls, size: int) -> "View":
        chunks = -(-size // CHUNK)
        return cls(size, np.zeros(chunks, bool), np.zeros(chunks, bool))


class MirrorViews:
    def __init__(self):
        self._views: dict[int, View] = {}  # the mirror's device address -> view

    def changed_runs(self, src: int, data, size: int, offset: int = 0) -> list[tuple[int, int]] | None:
        """The (offset, length) runs of [offset, offset + len(data)) of the
        mirror at `src` (`size` bytes) whose bytes (`data`, the device copy
        of that part now) differ from the client's view, as offsets in the
        mirror; None: send all of `data`.  Either way the client has `data`
        once it is sent.  A part not aligned to chunks is sent whole."""
        if size < MIN_BYTES:
            return None
        view = self._views.get(src)
        if view is None or view.size != size:
            view = self._views[src] = View.of(size)
        end = offset + len(data)
        first, last = offset // CHUNK, -(-end // CHUNK)
        if offset % CHUNK or (end % CHUNK and end != size):
            view.known[first:last] = False  # the client's bytes there are new to the shadow
            return None
        current = np.frombuffer(data, np.uint8)
        known = view.known[first:last]
        if view.cooldown > 0:
            view.cooldown -= len(current)
            known[:] = False
            view.seen[first:last] = True
            return None
        if not known.any():
            self._learn(view, current, offset, view.seen[first:last].copy())
            view.seen[first:last] = True
            return None
        whole = len(current) // CHUNK * CHUNK
        heads = current[:whole].reshape(-1, CHUNK)[:, :64] != view.shadow[offset:offset + whole].reshape(-1, CHUNK)[:, :64]
        if whole and heads.any(axis=1).mean() >= MOSTLY:  # rewritten all over: comparing would only cost
            view.streak += 1
            view.cooldown = min(2 ** view.streak - 1, MAX_COOLDOWN) * size
            known[:] = False
            return None
        view.streak = 0
        changed = ~known
        now, had = current.ctypes.data, view.shadow.ctypes.data + offset
        for i in np.flatnonzero(known):  # memcmp: several times numpy's speed, and no temporaries
            at = int(i) * CHUNK
            changed[i] = _memcmp(now + at, had + at, min(CHUNK, len(current) - at)) != 0
        edges = np.flatnonzero(np.diff(np.concatenate(([False], changed, [False])).astype(np.int8)))
        runs = [(offset + int(a) * CHUNK, min(int(b) * CHUNK, len(current)) - int(a) * CHUNK)
                for a, b in zip(edges[::2], edges[1::2])]
        for at, length in runs:
            view.shadow[at:at + length] = current[at - offset:at - offset + length]
        known[:] = True
        view.seen[first:last] = True
        return None if changed.all() else runs

    @staticmethod
    def _learn(view: View, current: np.ndarray, offset: int, chunks: np.ndarray) -> None:
        """The shadow takes `current` (the part at `offset`) where `chunks` says."""
        if not chunks.any():
            return
        if view.shadow is None:
            view.shadow = np.empty(view.size, np.uint8)
        if chunks.all():
            view.shadow[offset:offset + len(current)] = current
        else:
            for i in np.flatnonzero(chunks):
                at = int(i) * CHUNK
                view.shadow[offset + at:offset + at + CHUNK] = current[at:at + CHUNK]
        view.known[offset // CHUNK:offset // CHUNK + len(chunks)] |= chunks

    def host_sent(self, dst: int, size: int) -> None:
        """The host wrote [dst, dst + size) of the device copy."""
        for src, view in self._views.items():
            if src < dst + size and dst < src + view.size:
                first = max(dst - src, 0) // CHUNK
                last = -(-(min(dst + size, src + view.size) - src) // CHUNK)
                view.known[first:last] = False

    def forget(self, start: int, size: int) -> None:
        """[start, start + size) is freed (or unmapped): its views go."""
        for src in [s for s in self._views if start <= s < start + max(size, 1)]:
            del self._views[src]

    def clear(self) -> None:
        self._views.clear()
