"""What kind of copy a cudaMemcpy* is: the one copy of the rule.

With cudaMemcpyDefault the runtime infers the direction from where the two
pointers are: memory on a device (inside one of the session's allocations)
or not (host memory).  An explicit direction is kept as given; any other
kind is not a direction (cudaErrorInvalidMemcpyDirection).

Used by client/runtime/memory.py (`_check_kind`), and by C through
native/generated/copy_kind.h, which native/gen_rules.py generates from
INFERRED (native/allocation_table.c's copy_kind, for the copies C makes).
"""
from __future__ import annotations

from rcuda._generated.cuda_enums import ENUMS
from rcuda.errors import CudaError, cudaError

KINDS = ENUMS["cudaMemcpyKind"]
DEFAULT = "cudaMemcpyDefault"

#: (destination on a device, source on a device) -> the kind cudaMemcpyDefault means.
INFERRED = {
    (False, False): "cudaMemcpyHostToHost",
    (True, False): "cudaMemcpyHostToDevice",
    (False, True): "cudaMemcpyDeviceToHost",
    (True, True): "cudaMemcpyDeviceToDevice",
}

#: The kinds that are a direction: an explicit one is kept as given.
DIRECTIONS = frozenset(KINDS[name] for name in INFERRED.values())

_INFERRED_VALUES = {sides: KINDS[name] for sides, name in INFERRED.items()}


def copy_kind(kind: int, dst_on_device: bool, src_on_device: bool) -> int:
    """`kind`, with cudaMemcpyDefault made explicit by where the sides are."""
    if kind == KINDS[DEFAULT]:
        return _INFERRED_VALUES[(bool(dst_on_device), bool(src_on_device))]
    return kind


def checked_kind(kind: int, dst_on_device: bool, src_on_device: bool) -> int:
    """`copy_kind`, or cudaErrorInvalidMemcpyDirection for a kind that is no direction."""
    kind = copy_kind(kind, dst_on_device, src_on_device)
    if kind not in DIRECTIONS:
        raise CudaError(cudaError.cudaErrorInvalidMemcpyDirection, f"cudaMemcpyKind {kind}")
    return kind
