"""Small managed allocations share mirrors (arenas).

Every mirror costs a download at each synchronisation after the device may
have written (one request per mirror), a slot of native/mapped_memory.c's
table and two mappings.  A program that makes thousands of small managed
allocations (list nodes, per-item buffers) would pay all three per
allocation; carved from shared ARENA_BYTES mirrors it pays them per arena.

An arena hands out blocks of whole pages, first fit, and merges free
neighbours.  Allocations never share a page: the host's writes travel by
the page (client/memory/mapped.py), and a page written for one allocation
must not carry stale bytes of another that a kernel on another stream is
writing meanwhile.  Freed blocks are not checked any more (a kernel writing
one writes the arena), as within any allocator's pool.
"""
from __future__ import annotations

import bisect
import mmap

#: Allocations up to this size come from arenas; larger ones get a mirror each.
SMALL_BYTES = 64 << 10
ARENA_BYTES = 2 << 20
ALIGNMENT = mmap.PAGESIZE


def _aligned(size: int) -> int:
    return -(-size // ALIGNMENT) * ALIGNMENT


class Arena:
    """The free space of one shared mirror, as (offset, size) extents."""

    def __init__(self, mirror):
        self.mirror = mirror
        self.blocks = 0
        self._free_offsets = [0]
        self._free_sizes = {0: _round_down(mirror.size)}

    @property
    def empty(self) -> bool:
        return self.blocks == 0

    def take(self, size: int) -> int | None:
        """The address of a free block of at least `size` bytes, or None."""
        need = _aligned(size)
        for offset in self._free_offsets:
            room = self._free_sizes[offset]
            if room >= need:
                self._remove(offset)
                if room > need:
                    self._insert(offset + need, room - need)
                self.blocks += 1
                return self.mirror.host + offset
        return None

    def give(self, address: int, size: int) -> None:
        """A block back (as taken: its address and the size asked for)."""
        offset, length = address - self.mirror.host, _aligned(size)
        following = offset + length
        if following in self._free_sizes:  # the next extent is free: one extent
            length += self._free_sizes[following]
            self._remove(following)
        i = bisect.bisect_left(self._free_offsets, offset)
        if i > 0:
            before = self._free_offsets[i - 1]
            if before + self._free_sizes[before] == offset:  # so is the previous
                offset, length = before, length + self._free_sizes[before]
                self._remove(before)
        self._insert(offset, length)
        self.blocks -= 1

    def _insert(self, offset: int, size: int) -> None:
        bisect.insort(self._free_offsets, offset)
        self._free_sizes[offset] = size

    def _remove(self, offset: int) -> None:
        self._free_offsets.remove(offset)
        del self._free_sizes[offset]


def _round_down(size: int) -> int:
    return size // ALIGNMENT * ALIGNMENT
