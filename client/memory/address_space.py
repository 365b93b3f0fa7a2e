"""The program's address space: where its GPUs' pointers may lie.

Device pointers pass through unchanged (docs/design.md "Pointers"), so an
address must say which GPU, or the host, it belongs to: the GPUs' address
windows must not overlap one another, and no host memory of the program may
lie in one.  Each window is reserved by its server's driver, which takes the
client's address only as a hint; the client then *claims* the same range
here, as inaccessible memory (PROT_NONE, no swap reserved) that nothing else
in the process can be mapped over.  A window whose range cannot be claimed
(another server's window is there, or the program's memory) is moved by its
server.

Mapped memory's host copies are placed inside their device's claimed window,
at their device address, and given back to the claim when freed.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import threading

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value
MAP_NORESERVE = 0x4000
MAP_FIXED_NOREPLACE = 0x100000  # Linux 4.17; older kernels take it as a hint, which is checked
PROT_NONE = 0
MAP_FIXED = 0x10
_CLAIM = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE

_lock = threading.Lock()
_claims: dict[int, int] = {}  # base -> size, of this process's claimed windows


def claim(base: int, size: int) -> bool:
    """Claim [base, base + size) if nothing of the process lies there."""
    placed = _libc.mmap(base, size, PROT_NONE, _CLAIM | MAP_FIXED_NOREPLACE, -1, 0)
    if placed in (None, MAP_FAILED):
        return False
    if placed != base:  # an old kernel took the address as a hint
        _libc.munmap(placed, size)
        return False
    with _lock:
        _claims[base] = size
    return True


def claim_anywhere(size: int, alignment: int) -> int:
    """Claim `size` bytes wherever the kernel finds room, aligned to `alignment`."""
    placed = _libc.mmap(None, size + alignment, PROT_NONE, _CLAIM, -1, 0)
    if placed in (None, MAP_FAILED):
        raise OSError(ctypes.get_errno(), f"no room for {size} bytes of addresses in this process")
    base = -(-placed // alignment) * alignment
    if base > placed:
        _libc.munmap(placed, base - placed)
    if placed + alignment > base:
        _libc.munmap(base + size, placed + alignment - base)
    with _lock:
        _claims[base] = size
    return base


def unclaim(base: int) -> None:
    with _lock:
        size = _claims.pop(base)
    _libc.munmap(base, size)


def claimed(address: int, length: int) -> bool:
    """Whether [address, address + length) lies inside one claimed window."""
    with _lock:
        return any(b <= address and address + length <= b + s for b, s in _claims.items())


def place(address: int, length: int, memory: int) -> bool:
    """Map the memory file `memory` at `address`, inside a claimed window."""
    if not claimed(address, length):
        return False
    placed = _libc.mmap(address, length, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | MAP_FIXED,
                        memory, 0)
    return placed == address


def place_private(address: int, length: int) -> bool:
    """Plain zeroed memory of the process at `address`, inside a claimed window."""
    if not claimed(address, length):
        return False
    placed = _libc.mmap(address, length, mmap.PROT_READ | mmap.PROT_WRITE,
                        mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED, -1, 0)
    return placed == address


def unmap(address: int, length: int) -> None:
    """The end of host memory rcuda mapped: back to its window's claim if it
    lies in one (the window stays whole), else unmapped."""
    if claimed(address, length):
        _libc.mmap(address, length, PROT_NONE, _CLAIM | MAP_FIXED, -1, 0)
    else:
        _libc.munmap(address, length)


def _forget_in_child() -> None:
    """A forked child's session claims windows of its own; the parent's
    stay mapped (its mapped memory's host copies are the child's plain
    memory now)."""
    global _lock
    _lock = threading.Lock()
    _claims.clear()


os.register_at_fork(after_in_child=_forget_in_child)


#: Where windows are claimed first: the low part of the user address space,
#: far from where programs and drivers map things (the top), so a server's
#: driver usually takes the same range as a hint.
SLOTS_START = 0x1000_0000_0000
SLOTS_END = 0x7000_0000_0000

#: Moves asked of a server before its window is given up on.
MOVES = 16


def claim_slot(size: int, preferred: int | None = None) -> int:
    """Claim a window of `size` bytes: at `preferred` if free, else at the
    lowest free multiple of `size` among the slots, else anywhere."""
    if preferred is not None and claim(preferred, size):
        return preferred
    for base in range(SLOTS_START, SLOTS_END - size + 1, size):
        if claim(base, size):
            return base
    return claim_anywhere(size, 2 << 20)


def settle(size: int, hint: int, granted: int | None, move, what: str) -> int:
    """Where a window of `size` bytes ends up, claimed here.  The process
    claimed `hint` and asked for the window there; its server answered
    `granted`.  If that range cannot be claimed, `move(new_hint)` asks the
    server again (returning its new answer), up to MOVES times."""
    for _ in range(MOVES):
        if granted == hint:
            return hint
        if granted is not None and claim(granted, size):
            unclaim(hint)
            return granted
        unclaim(hint)
        hint = claim_slot(size)
        granted = move(hint)
    unclaim(hint)
    raise OSError(f"{what}: no room in this process where the server's driver reserves it "
                  f"(last at {granted:#x}, after {MOVES} moves)")
