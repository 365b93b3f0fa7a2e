"""Stream memory operations (cuStreamWriteValue32/64, cuStreamWaitValue32/64,
cuStreamBatchMemOp): the one copy of their rules, for the client
(client/driver/stream_memops.py), the server's check of a `stream_mem_ops`
request (server/device_service.py) and the sim's wait conditions.

On the wire an operation is [kind, address, value, flags]: `kind` a
CUstreamBatchMemOpType, `address` and `value` 0 for the kinds that have
none (a flush, a barrier), `flags` the operation's own (CUstreamWaitValue_flags,
CUstreamWriteValue_flags, CUstreamMemoryBarrier_flags).  The numbers are
cuda.h's (tests/test_stream_memops.py compares them).
"""
from __future__ import annotations

#: CUstreamBatchMemOpType.
WAIT_VALUE_32, WRITE_VALUE_32, FLUSH_REMOTE_WRITES, WAIT_VALUE_64, WRITE_VALUE_64, BARRIER = 1, 2, 3, 4, 5, 6
#: The kinds that name a word of device memory: kind -> its width in bytes.
WIDTH = {WAIT_VALUE_32: 4, WRITE_VALUE_32: 4, WAIT_VALUE_64: 8, WRITE_VALUE_64: 8}
WAITS = frozenset({WAIT_VALUE_32, WAIT_VALUE_64})
WRITES = frozenset({WRITE_VALUE_32, WRITE_VALUE_64})

#: CUstreamWaitValue_flags: a condition in the low bits, and FLUSH.
WAIT_GEQ, WAIT_EQ, WAIT_AND, WAIT_NOR = 0, 1, 2, 3
CONDITION_MASK = 0x3
WAIT_FLUSH = 1 << 30
#: CUstreamWriteValue_flags: CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER.
WRITE_NO_MEMORY_BARRIER = 0x1
#: CUstreamMemoryBarrier_flags: CU_STREAM_MEMORY_BARRIER_TYPE_SYS, _GPU.
BARRIER_TYPES = (0, 1)
#: The flags each kind may carry (a bit set: any subset of the bits).
FLAG_BITS = {WAIT_VALUE_32: CONDITION_MASK | WAIT_FLUSH, WAIT_VALUE_64: CONDITION_MASK | WAIT_FLUSH,
             WRITE_VALUE_32: WRITE_NO_MEMORY_BARRIER, WRITE_VALUE_64: WRITE_NO_MEMORY_BARRIER,
             FLUSH_REMOTE_WRITES: 0, BARRIER: 1}

#: cuStreamBatchMemOp's count "must be less than 256"; one request carries at most this many.
MAX_OPS = 255

#: Each wait condition, in words (for messages).
CONDITIONS = {WAIT_GEQ: "word >= {:#x} (cyclic)", WAIT_EQ: "word == {:#x}", WAIT_AND: "word & {:#x} != 0",
              WAIT_NOR: "~(word | {:#x}) != 0"}


def problem(op) -> str | None:
    """What is wrong with one operation as sent on the wire, or None: its
    shape, kind, flags, value width and address alignment."""
    if not isinstance(op, (list, tuple)) or len(op) != 4 or not all(type(v) is int and v >= 0 for v in op):
        return "an operation must be [kind, address, value, flags], four non-negative integers"
    kind, address, value, flags = op
    if kind not in FLAG_BITS:
        return f"kind {kind} is not a CUstreamBatchMemOpType"
    if flags & ~FLAG_BITS[kind]:
        return f"flags {flags:#x} are not those of kind {kind}"
    width = WIDTH.get(kind)
    if width is None:
        return None if address == value == 0 else f"kind {kind} takes no address or value"
    if value >> (8 * width):
        return f"value {value:#x} does not fit {width} bytes"
    if address == 0 or address % width:
        return f"address {address:#x} is not a {width}-byte aligned device address"
    return None


def satisfied(word: int, value: int, flags: int, width: int) -> bool:
    """Whether a wait's condition holds for the `width`-byte `word` now in
    memory (cuda.h's CUstreamWaitValue_flags; GEQ compares cyclically:
    (int32_t)(*addr - value) >= 0)."""
    bits = 8 * width
    mask = (1 << bits) - 1
    condition = flags & CONDITION_MASK
    if condition == WAIT_GEQ:
        return (word - value) & mask < 1 << (bits - 1)
    if condition == WAIT_EQ:
        return word == value
    if condition == WAIT_AND:
        return word & value != 0
    return ~(word | value) & mask != 0  # NOR


def condition(value: int, flags: int) -> str:
    """A wait's condition, in words."""
    return CONDITIONS[flags & CONDITION_MASK].format(value)
