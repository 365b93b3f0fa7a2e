"""What the client has of each mirror (mapped and managed memory,
client/memory/mapped.py), so that a download after a synchronisation sends
only what the device changed.

A mirror's host copy holds what the server last sent it or received from
it.  The server keeps a digest of each CHUNK of that view
(server/backends/chunk_digests.py: a GPU server computes them on the GPU,
without copying the memory off it); at a `mirror_dtoh` of a mirror or of a
part of it (managed memory is downloaded where the host touches it, in
chunk-aligned parts) it digests the device copy and sends the chunks whose
digests differ (all of it the first time).  Chunks the host sends
(`mirror_htod`, `mirror_zero`) become unknown and go back at the next
download: the device may have changed other bytes of them.  Freeing the
memory forgets its views.  A 1 GiB managed allocation of which a kernel
changed 1 MiB then costs the digests of 1 GiB on the server's GPU and about
1 MiB on the PCIe bus and the network, not 1 GiB; where the host reads only
that MiB, the digests are of that MiB.

A chunk's digest is taken at its second download, so a range downloaded
once costs nothing more.  A download that finds nearly every chunk changed
(a kernel rewriting all of it) is sent whole, and the next few are sent
whole without digesting (more of them each time it happens again; a
mirror's worth of parts counts as one), before digests are taken again, in
case the program's pattern changed.  Mirrors under MIN_BYTES are always
sent whole.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from rcuda.wire import MIRROR_CHUNK

#: The unit of change.
CHUNK = MIRROR_CHUNK
#: Smaller mirrors are sent whole.
MIN_BYTES = 4 << 20
#: A download that finds at least this share of its chunks changed is sent whole.
MOSTLY = 0.9
#: The most downloads sent whole after ones that found everything changed.
MAX_COOLDOWN = 15

#: Device.chunk_digests: (address, size, chunk) -> one uint64 per chunk.
Digests = Callable[[int, int, int], np.ndarray]


@dataclass
class View:
    size: int
    seen: np.ndarray      # per chunk: downloaded before (digested at the next download)
    known: np.ndarray     # per chunk: `digests` holds the digest of what the client has
    digests: np.ndarray   # uint64 per chunk
    streak: int = 0       # downloads in a row that found it (nearly) all changed
    cooldown: int = 0     # bytes still to send whole before it is digested again (so many times its size)

    @classmethod
    def of(cls, size: int) -> "View":
        chunks = -(-size // CHUNK)
        return cls(size, np.zeros(chunks, bool), np.zeros(chunks, bool), np.zeros(chunks, np.uint64))


class MirrorViews:
    def __init__(self):
        self._views: dict[int, View] = {}  # the mirror's device address -> view

    def changed_runs(self, src: int, size: int, offset: int, length: int,
                     digests: Digests) -> list[tuple[int, int]] | None:
        """The (offset, length) runs of the part [offset, offset + length) of
        the mirror at `src` (`size` bytes) whose device bytes differ from the
        client's view, as offsets in the mirror, or None: send all of the
        part.  `digests` digests the device copy.  Either way the client has
        the device's bytes once they are sent.  A part not aligned to chunks
        is sent whole."""
        if size < MIN_BYTES:
            return None
        view = self._views.get(src)
        if view is None or view.size != size:
            view = self._views[src] = View.of(size)
        end = offset + length
        first, last = offset // CHUNK, -(-end // CHUNK)
        known, seen = view.known[first:last], view.seen[first:last]
        if offset % CHUNK or (end % CHUNK and end != size):
            known[:] = False  # the client's bytes there are new to the digests
            return None
        if view.cooldown > 0:
            view.cooldown -= length
            known[:] = False
            seen[:] = True
            return None
        if not known.any():
            if seen.any():  # downloaded before: worth digesting
                view.digests[first:last] = digests(src + offset, length, CHUNK)
                known[:] = True
            seen[:] = True
            return None
        now = digests(src + offset, length, CHUNK)
        changed = ~known | (now != view.digests[first:last])
        if changed.mean() >= MOSTLY:  # rewritten all over: digesting would only cost
            view.streak += 1
            view.cooldown = min(2 ** view.streak - 1, MAX_COOLDOWN) * size
            known[:] = False
            return None
        view.streak = 0
        view.digests[first:last] = now
        known[:] = True
        edges = np.flatnonzero(np.diff(np.concatenate(([False], changed, [False])).astype(np.int8)))
        return [(offset + int(a) * CHUNK, min(int(b) * CHUNK, length) - int(a) * CHUNK)
                for a, b in zip(edges[::2], edges[1::2])]

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
