"""A GPU's `launches` batches run by C calling the driver
(native/batch_executor.c, built into rcuda/_lib/librcuda_server.so).

The cupy backend teaches the executor what it may run: the session's
kernels (id, CUfunction, where each parameter lies in the buffer), streams (id, CUstream),
events (id, CUevent),
allocations (TaughtAllocationTable) and the device's launch limits.  The
session's thread then hands it each batch; a record C will not run comes
back to Python at its offset (server/device_service.py runs it, or refuses
it with the same message as its own message would get).
"""
from __future__ import annotations

import functools

import cffi

from rcuda.binaries import LIB_DIR
from rcuda.driver_errors import CUresult, error_name
from rcuda.errors import CudaError
from rcuda.launch_rules import device_limits

from .base import Allocation, AllocationTable, WatchedCompletion
from .cuda_status import driver_status

LIBRARY = LIB_DIR / "librcuda_server.so"
DRIVER_LIBRARY = "libcuda.so.1"
#: A server started with RCUDA_BATCH_EXECUTOR=python runs every record
#: through Python, as before the executor: for measuring the two side by side.
SWITCH_VARIABLE = "RCUDA_BATCH_EXECUTOR"
_ERROR_SIZE = 256

_CDEF = """
typedef struct rcuda_executor rcuda_executor;
struct rcuda_executor_progress { uint64_t offset; uint32_t count; uint32_t fn; int32_t status; uint64_t uploaded; };
rcuda_executor *rcuda_executor_open(const char *driver_library, char *error, size_t error_size);
void rcuda_executor_close(rcuda_executor *ex);
void rcuda_executor_set_limits(rcuda_executor *ex, const uint32_t *max_threads_dim, const uint32_t *max_grid_size,
                               uint64_t max_threads_per_block, uint64_t shared_mem_per_block_optin);
int rcuda_executor_set_function(rcuda_executor *ex, uint32_t id, void *function, uint32_t buffer_size,
                                uint32_t count, const uint32_t *offsets);
int rcuda_executor_set_stream(rcuda_executor *ex, uint64_t id, void *stream);
void rcuda_executor_forget_stream(rcuda_executor *ex, uint64_t id);
int rcuda_executor_set_event(rcuda_executor *ex, uint64_t id, void *event);
void rcuda_executor_forget_event(rcuda_executor *ex, uint64_t id);
int rcuda_executor_add_range(rcuda_executor *ex, uint64_t start, uint64_t size);
void rcuda_executor_remove_range(rcuda_executor *ex, uint64_t start);
void rcuda_executor_clear_ranges(rcuda_executor *ex);
int rcuda_executor_run(rcuda_executor *ex, const uint8_t *data, size_t size, struct rcuda_executor_progress *progress);
struct rcuda_serve_state {
    int32_t output_fd; uint64_t output_seen; uint64_t spin_ns; uint64_t idle_spin_ns; uint64_t memory_total;
    uint64_t consumed; uint32_t served; uint32_t last_op; uint64_t to_device, from_device;
    uint64_t seq; uint32_t slot, op, size; int32_t status;
};
int rcuda_executor_serve_start(rcuda_executor *ex);
void rcuda_executor_serve_stop(rcuda_executor *ex);
int rcuda_executor_serve(rcuda_executor *ex, int fd, const uint8_t *left, size_t left_size,
                         struct rcuda_serve_state *state);
int rcuda_executor_slot_query(rcuda_executor *ex, uint32_t slot);
int rcuda_executor_slot_wait(rcuda_executor *ex, uint32_t slot);
const void *rcuda_executor_slot_buffer(rcuda_executor *ex, uint32_t slot);
void rcuda_executor_slot_free(rcuda_executor *ex, uint32_t slot);
"""
DRIVER_ERROR = 2  # rcuda_executor_run's outcome for a driver error (0: all ran, 1: a record for Python)
#: rcuda_executor_serve's outcomes (native/served_requests.c).
SERVE_IDLE, SERVE_PYTHON, SERVE_PENDING, SERVE_BROKEN = range(4)
#: The requests C serves, by native/served_requests.c's number.
SERVED_OPS = {1: "dtoh", 2: "htod", 3: "sync", 4: "stream_sync", 5: "event_sync", 6: "mem_info"}


@functools.cache
def _library():
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    return ffi, ffi.dlopen(str(LIBRARY))


class BatchExecutor:
    """C's runner of one GPU's batches; made on that GPU's thread, with its
    context current, and used by that thread only."""

    def __init__(self, index: int, properties: dict, driver_library: str = DRIVER_LIBRARY):
        self._ffi, self._lib = _library()
        error = self._ffi.new("char[]", _ERROR_SIZE)
        executor = self._lib.rcuda_executor_open(driver_library.encode(), error, _ERROR_SIZE)
        if executor == self._ffi.NULL:
            raise OSError(f"GPU {index}: the batch executor cannot start: {self._ffi.string(error).decode()}")
        # Freed with the last reference (the device's, its allocation table's):
        # nothing can call it after.
        self._executor = self._ffi.gc(executor, self._lib.rcuda_executor_close)
        self.index = index
        self.uploaded = 0
        self._progress = self._ffi.new("struct rcuda_executor_progress *")
        limits = device_limits(properties)
        self._lib.rcuda_executor_set_limits(self._executor, list(limits["maxThreadsDim"]),
                                            list(limits["maxGridSize"]), limits["maxThreadsPerBlock"],
                                            limits["sharedMemPerBlockOptin"])

    def _checked(self, status: int, what: str) -> None:
        if status:
            raise MemoryError(f"GPU {self.index}: the batch executor is out of memory ({what})")

    def set_function(self, fn: int, function) -> None:
        """Kernel id `fn` of the session is `function` (a CupyFunction)."""
        handle, layout = self._ffi.cast("void *", function.handle), function.layout
        self._checked(self._lib.rcuda_executor_set_function(self._executor, fn, handle, layout.buffer_size,
                                                            len(layout.offsets), list(layout.offsets)), "kernels")

    def set_stream(self, stream: int, handle: int) -> None:
        self._checked(self._lib.rcuda_executor_set_stream(self._executor, stream, self._ffi.cast("void *", handle)),
                      "streams")

    def forget_stream(self, stream: int) -> None:
        self._lib.rcuda_executor_forget_stream(self._executor, stream)

    def set_event(self, event: int, handle: int) -> None:
        self._checked(self._lib.rcuda_executor_set_event(self._executor, event, self._ffi.cast("void *", handle)),
                      "events")

    def forget_event(self, event: int) -> None:
        self._lib.rcuda_executor_forget_event(self._executor, event)

    def add_range(self, start: int, size: int) -> None:
        self._checked(self._lib.rcuda_executor_add_range(self._executor, start, size), "allocations")

    def remove_range(self, start: int) -> None:
        self._lib.rcuda_executor_remove_range(self._executor, start)

    def clear_ranges(self) -> None:
        self._lib.rcuda_executor_clear_ranges(self._executor)

    def run(self, data, offset: int, count: int, describe) -> tuple[int, int, CudaError | None]:
        """Run `count` records of `data` from `offset` on, until one is
        Python's or fails in the driver.  Returns where to go on (offset,
        records left) and the failure (`describe(fn)` names the failed
        record's work), else None; records left with no failure: the
        record at the offset is Python's.  `uploaded` is then the bytes
        the run's uploads sent."""
        progress = self._progress
        progress.offset, progress.count = offset, count
        outcome = self._lib.rcuda_executor_run(self._executor, self._ffi.from_buffer(data), len(data), progress)
        failure = None
        if outcome == DRIVER_ERROR:
            status = progress.status
            failure = CudaError(driver_status(status), f"{describe(progress.fn)} on GPU {self.index}: "
                                                       f"{error_name(status) or 'CUresult'} ({status})")
        self.uploaded = progress.uploaded
        return progress.offset, progress.count, failure

    # -- small synchronous requests (native/served_requests.c)

    def start_serving(self) -> None:
        """Make what serving requests in C needs (pinned buffers, events):
        raises OSError where the driver refuses."""
        status = self._lib.rcuda_executor_serve_start(self._executor)
        if status:
            raise OSError(f"GPU {self.index}: requests cannot be served in C: "
                          f"{error_name(status) or 'CUresult'} ({status})")
        self._serve_state = self._ffi.new("struct rcuda_serve_state *")

    def stop_serving(self) -> None:
        """Free what start_serving made (the device's close, its context current)."""
        self._lib.rcuda_executor_serve_stop(self._executor)

    def serve(self, fd: int, left: bytes, output_fd: int, output_seen: int, spin_seconds: float,
              idle_spin_seconds: float, memory_total: int):
        """Serve the lane's requests C can, from `left` (read ahead) or the
        socket: (outcome, state), the state's fields as C left them.
        `spin_seconds`: how long a request's work is polled before Python
        gets it; `idle_spin_seconds`: how long C waits awake for the next
        request after answering one; `memory_total`: the device memory a
        session may have (cudaMemGetInfo goes to Python where the driver's
        total is larger: a --memory-limit)."""
        state = self._serve_state
        state.output_fd, state.output_seen, state.memory_total = output_fd, output_seen, memory_total
        state.spin_ns, state.idle_spin_ns = int(spin_seconds * 1e9), int(idle_spin_seconds * 1e9)
        outcome = self._lib.rcuda_executor_serve(self._executor, fd, left, len(left), state)
        return outcome, state

    def pending(self, state, wake, watchers: set) -> "ServedRequest":
        """The request C took but left to Python to answer (SERVE_PENDING);
        `wake` and `watchers`: the device's, for the waiter thread (which
        the device's close joins before freeing the slots)."""
        return ServedRequest(self, state.slot, SERVED_OPS[state.op], state.size, wake, watchers)


class ServedRequest(WatchedCompletion):
    """A request C took and issued whose work was not done within the spin
    window (or ended with an error, or with device output): its slot's
    event says when it is done; a download's bytes are in its slot's
    pinned buffer until it is released."""

    def __init__(self, executor: BatchExecutor, slot: int, op: str, size: int, wake, watchers: set):
        super().__init__(wake, f"rcuda GPU{executor.index} waiter", watchers)
        self._executor, self.slot, self.op, self.size = executor, slot, op, size

    def ready(self) -> bool:
        status = self._executor._lib.rcuda_executor_slot_query(self._executor._executor, self.slot)
        if status == CUresult.CUDA_ERROR_NOT_READY:
            return False
        if status:
            raise CudaError(driver_status(status), f"{self.op} on GPU {self._executor.index}: "
                                                   f"{error_name(status) or 'CUresult'} ({status})")
        return True

    def data(self) -> memoryview:
        """A download's bytes, copied out of the slot (which is reused)."""
        ffi = self._executor._ffi
        buffer = self._executor._lib.rcuda_executor_slot_buffer(self._executor._executor, self.slot)
        return memoryview(bytes(ffi.buffer(buffer, self.size)))

    def _block(self) -> None:
        # cffi lets go of the GIL for the call: the GPU thread serves on.
        self._executor._lib.rcuda_executor_slot_wait(self._executor._executor, self.slot)

    def _give_back(self) -> None:
        self._executor._lib.rcuda_executor_slot_free(self._executor._executor, self.slot)


class TaughtAllocationTable(AllocationTable):
    """A GPU's allocation table that tells its batch executor each change,
    so that C runs a memset or a copy only inside the session's memory."""

    def __init__(self, executor: BatchExecutor):
        super().__init__()
        self._executor = executor

    def add(self, allocation: Allocation) -> None:
        super().add(allocation)
        self._executor.add_range(allocation.start, allocation.size)

    def remove(self, ptr: int, unmap: bool = False) -> Allocation:
        allocation = super().remove(ptr, unmap)
        self._executor.remove_range(ptr)
        return allocation

    def clear(self) -> list[Allocation]:
        self._executor.clear_ranges()
        return super().clear()
