"""Address ranges the sim's GPUs allocate in, reserved as a CUDA driver
reserves them (cuMemAddressReserve): a client's address is a hint, taken
when that range is free, and a range is someone's until it is released.

Some drivers do not take hints at all (an H100's would not reserve
0x6000_0000_0000 for a program's cuMemMap).  RCUDA_SIM_ADDRESSES=own makes
the sim one of them: it then places every range itself, from the top of
its own area downwards, so two sim servers hand out the same addresses, as
two GPU servers may.  Clients must cope (docs/design.md "Pointers"), and
tests check that they do.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from rcuda.errors import CudaError, cudaError

ADDRESSES_VARIABLE = "RCUDA_SIM_ADDRESSES"

#: Where a sim that ignores hints places its ranges: downwards from here.
OWN_TOP = 0x5000_0000_0000
OWN_BOTTOM = 0x1000_0000_0000
#: Ranges start on multiples of this (a GPU's large-page size).
ALIGNMENT = 2 << 20


def takes_hints_from_environment() -> bool:
    """False when the server's RCUDA_SIM_ADDRESSES is `own`."""
    text = os.environ.get(ADDRESSES_VARIABLE, "hint").strip().lower()
    if text not in ("hint", "own"):
        raise ValueError(f"{ADDRESSES_VARIABLE}={text!r}: `hint` (the default: the client's address when free) "
                         f"or `own` (the sim places every range itself)")
    return text == "hint"


@dataclass(eq=False)
class Reservation:
    base: int
    size: int
    space: "AddressSpace"

    @property
    def end(self) -> int:
        return self.base + self.size

    def release(self) -> None:
        self.space.release(self)


class AddressSpace:
    """One worker's reserved ranges (its GPUs share one address space, as
    a process's contexts do)."""

    def __init__(self, takes_hints: bool = True):
        self.takes_hints = takes_hints
        self._lock = threading.Lock()
        self._reserved: list[Reservation] = []
        self._own_next = OWN_TOP  # never reused: each own range is new, as a driver's next one is

    def reserve(self, size: int, hint: int | None) -> Reservation:
        size = -(-size // ALIGNMENT) * ALIGNMENT
        with self._lock:
            if self.takes_hints and hint and hint % ALIGNMENT == 0 and self._free(hint, size):
                base = hint
            else:
                base = self._own_place(size)
            reservation = Reservation(base, size, self)
            self._reserved.append(reservation)
            return reservation

    def release(self, reservation: Reservation) -> None:
        with self._lock:
            if reservation in self._reserved:
                self._reserved.remove(reservation)

    def _free(self, base: int, size: int) -> bool:
        return all(base + size <= r.base or r.end <= base for r in self._reserved)

    def _own_place(self, size: int) -> int:
        base = (self._own_next - size) // ALIGNMENT * ALIGNMENT
        while not self._free(base, size):
            base = (min(r.base for r in self._reserved if r.base < base + size and base < r.end) - size) \
                // ALIGNMENT * ALIGNMENT
        if base < OWN_BOTTOM:
            raise CudaError(cudaError.cudaErrorMemoryAllocation, "the sim server's address space is used up")
        self._own_next = base
        return base
