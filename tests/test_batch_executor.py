"""The GPU server's batch executor (native/batch_executor.c), run against a
stand-in for the driver library (tests/stand_in_driver.c: memory is host
memory, launches are recorded): a `launches` batch runs in C in order, with
the parameters as sent, into the streams the session made; what C must not
run (kinds Python owns, a launch a device limit refuses, an unknown kernel
or stream, memory outside the session's allocations, a malformed record)
comes back to Python at its offset; a driver error names the kernel.  Then
the same through the server's handler of `launches` with the cupy backend
(tests/fake_cuda.py standing in for CuPy)."""
from __future__ import annotations

import ctypes
import ctypes.util
import random
import struct
import sys
import types

import numpy as np
import pytest

from fake_cuda import PinnedPool
from stand_in_service import DTOD, EVENT_RECORD, HTOD, LAUNCH, MEMSET, WAIT, calls, image_layout
from rcuda import wire
from rcuda.errors import CudaError, cudaError
from rcuda.server.backends import cuda_batches, cupy_backend
from rcuda.server.backends.base import ParamLayout
from rcuda.server.backends.cuda_batches import BatchExecutor

PROPERTIES = {"maxThreadsDim": [1024, 1024, 64], "maxGridSize": [2**31 - 1, 65535, 65535],
              "maxThreadsPerBlock": 1024, "sharedMemPerBlockOptin": 232448, "sharedMemPerBlock": 49152}
def kernel(driver, handle: int, *sizes: int) -> types.SimpleNamespace:
    """A kernel of parameters `sizes` bytes each, packed; its image has them where the client does."""
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    layout = ParamLayout(tuple(offsets), tuple(sizes))
    image_layout(driver, handle, layout)
    return types.SimpleNamespace(handle=handle, name=f"kernel{handle:#x}", layout=layout)


def launch_record(fn: int, params: bytes, grid=(1, 1, 1), block=(32, 1, 1), shmem: int = 0, stream: int = 0) -> bytes:
    record = wire.LAUNCH_RECORD.pack(fn, shmem, *grid, *block, stream, len(params)) + params
    return record + bytes(-len(record) % 8)


def op_record(kind: int, fields: bytes, stream: int = 0) -> bytes:
    return launch_record(kind, fields, (0, 0, 0), (0, 0, 0), 0, stream)


def memset_record(ptr: int, size: int, value: int, stream: int = 0) -> bytes:
    return op_record(wire.RECORD_MEMSET, wire.MEMSET_FIELDS.pack(ptr, size, value), stream)


def dtod_record(dst: int, src: int, size: int, stream: int = 0) -> bytes:
    return op_record(wire.RECORD_DTOD, wire.DTOD_FIELDS.pack(dst, src, size), stream)


def htod_record(dst: int, data: bytes, stream: int = 0) -> bytes:
    return op_record(wire.RECORD_HTOD, wire.HTOD_FIELDS.pack(dst) + data, stream)


def event_record(kind: int, event: int, stream: int = 0) -> bytes:
    return op_record(kind, wire.EVENT_FIELDS.pack(event), stream)


def run_all(executor: BatchExecutor, data: bytes, count: int):
    """Run a batch as the server does: C, and Python (here: noted) for
    each record C hands back.  Returns (Python's offsets, failures)."""
    offset, left, python, failures = 0, count, [], []
    while left:
        offset, left, failure = executor.run(data, offset, left, lambda fn: f"work {fn:#x}")
        if failure is not None:
            failures.append(failure)
        elif left:
            python.append(offset)
            offset += (wire.LAUNCH_RECORD.size + wire.LAUNCH_RECORD.unpack_from(data, offset)[-1] + 7) & ~7
            left -= 1
    assert offset == len(data)
    return python, failures


@pytest.fixture
def executor(driver):
    executor = BatchExecutor(3, PROPERTIES, driver.path)
    executor.set_stream(0, 0)
    executor.set_stream(7, 0x5700)
    return executor


def test_a_batch_runs_in_order_with_its_parameters(driver, executor):
    memory = np.zeros(4096, np.uint8)
    base = memory.ctypes.data
    executor.add_range(base, 4096)
    executor.set_function(1, kernel(driver, 0xF1, 8, 4))
    executor.set_function(2, kernel(driver, 0xF2))
    params = struct.pack("<Qi", base, -5)
    batch = (launch_record(1, params, (3, 2, 1), (64, 2, 1), 128, 7)
             + memset_record(base, 100, 0x1AB)
             + dtod_record(base + 1000, base, 50, 7)
             + launch_record(2, b"")
             + memset_record(base, 0, 9)  # nothing to do, and no call
             + htod_record(base + 3000, b"uploaded", 7)
             + htod_record(base + 3000, b"")
             + event_record(wire.RECORD_EVENT, 3, 7)
             + event_record(wire.RECORD_WAIT, 3, 0))
    executor.set_event(3, 0xE3)
    assert run_all(executor, batch, 9) == ([], [])
    assert executor.uploaded == 8
    log = calls(driver)
    assert [c.kind for c in log] == [LAUNCH, MEMSET, DTOD, LAUNCH, HTOD, EVENT_RECORD, WAIT]
    assert (log[5].function, log[5].stream) == (0xE3, 0x5700)
    assert (log[6].function, log[6].stream, log[6].value) == (0xE3, None, 0)
    first = log[0]
    assert (first.function, first.stream, list(first.grid), list(first.block), first.shared_mem) == \
        (0xF1, 0x5700, [3, 2, 1], [64, 2, 1], 128)
    assert bytes(first.params[:first.param_bytes]) == params
    assert all(c.context == 0xC0 for c in log)
    assert (log[1].dst, log[1].size, log[1].value, log[1].stream) == (base, 100, 0xAB, None)
    assert (log[2].dst, log[2].src, log[2].size, log[2].stream) == (base + 1000, base, 50, 0x5700)
    assert log[3].param_bytes == 0 and log[3].function == 0xF2
    assert bytes(memory[1000:1050]) == b"\xab" * 50 and memory[100] == 0
    assert (log[4].dst, log[4].size, log[4].stream) == (base + 3000, 8, 0x5700)
    assert bytes(memory[3000:3009]) == b"uploaded\0"


def test_the_gpu_context_is_made_current_for_each_batch(driver, executor):
    executor.set_function(1, kernel(driver, 0xF1))
    driver.stand_in_set_current(0xDEAD)  # another device's, left by the thread's last call
    run_all(executor, launch_record(1, b""), 1)
    assert calls(driver)[0].context == 0xC0


def test_records_c_must_not_run_come_back_to_python_at_their_offsets(driver, executor):
    memory = np.zeros(4096 * 16 + 64, np.uint8)  # (the stand-in writes what C copies: real bytes at both)
    base = memory.ctypes.data
    executor.add_range(base, 256)
    executor.add_range(base + 4096 * 16, 64)  # another allocation, not adjacent
    executor.set_function(1, kernel(driver, 0xF1, 8))
    records = [
        launch_record(1, bytes(8)),                                      # C
        htod_record(base + 254, b"abc"),                                 # an upload past the end
        op_record(wire.RECORD_GRAPH, struct.pack("<Q", 4)),              # Python owns graph launches
        launch_record(9, bytes(8)),                                      # unknown kernel
        launch_record(1, bytes(16)),                                     # parameters of the wrong size
        launch_record(1, bytes(8), stream=8),                            # unknown stream
        launch_record(1, bytes(8), block=(1025, 1, 1)),                  # a device limit: block_threads
        launch_record(1, bytes(8), grid=(0, 1, 1)),                      # grid_not_empty
        launch_record(1, bytes(8), shmem=232449),                        # dynamic_shared_memory
        memset_record(base + 200, 57, 1),                                # past the allocation's end
        memset_record(base - 1, 2, 1),                                   # before it
        dtod_record(base, base + 4096 * 16, 65),                         # source too long
        dtod_record(base + 4096 * 16, base, 64),                         # C: both inside
        op_record(wire.RECORD_MEMSET, bytes(8)),                         # fields of the wrong size
        op_record(wire.RECORD_HTOD, bytes(4)),                           # no destination
        event_record(wire.RECORD_EVENT, 99),                             # an unknown event
        op_record(wire.RECORD_WAIT, bytes(4)),                           # fields of the wrong size
        memset_record(2**64 - 8, 16, 1),                                 # wraps around
        launch_record(1, bytes(8)),                                      # C
    ]
    offsets = [sum(map(len, records[:i])) for i in range(len(records))]
    python, failures = run_all(executor, b"".join(records), len(records))
    assert failures == []
    assert python == offsets[1:12] + offsets[13:18]
    assert [c.kind for c in calls(driver)] == [LAUNCH, DTOD, LAUNCH]


def test_forgotten_streams_and_allocations_are_python_s(driver, executor):
    memory = np.zeros(64, np.uint8)
    executor.add_range(memory.ctypes.data, 64)
    executor.set_function(1, kernel(driver, 0xF1))
    executor.set_event(4, 0xE4)
    executor.forget_stream(7)
    executor.forget_event(4)
    executor.remove_range(memory.ctypes.data)
    batch = launch_record(1, b"", stream=7) + memset_record(memory.ctypes.data, 8, 1) + event_record(wire.RECORD_EVENT, 4)
    first, second = len(launch_record(1, b"")), len(memset_record(0, 0, 0))
    assert run_all(executor, batch, 3)[0] == [0, first, first + second]
    executor.add_range(memory.ctypes.data, 64)
    executor.clear_ranges()
    assert run_all(executor, memset_record(memory.ctypes.data, 8, 1), 1)[0] == [0]
    assert calls(driver) == []


def test_a_driver_error_names_the_work_and_the_rest_goes_on(driver, executor):
    executor.set_function(1, kernel(driver, 0xF1))
    executor.set_function(2, kernel(driver, 0xF2))
    driver.stand_in_fail(0xF2, 700)  # CUDA_ERROR_ILLEGAL_ADDRESS
    batch = launch_record(2, b"") + launch_record(1, b"")
    offset, left, failure = executor.run(batch, 0, 2, lambda fn: f"launch of kernel number {fn}")
    assert (offset, left) == (len(launch_record(2, b"")), 1)
    assert failure.status == cudaError.cudaErrorIllegalAddress
    assert str(failure) == "launch of kernel number 2 on GPU 3: CUDA_ERROR_ILLEGAL_ADDRESS (700)"
    assert executor.run(batch, offset, left, str) == (len(batch), 0, None)
    assert [c.function for c in calls(driver)] == [0xF1]


def test_malformed_batches_go_to_python_and_never_crash(driver, executor):
    memory = np.zeros(1 << 16, np.uint8)
    base = memory.ctypes.data
    executor.add_range(base, 1 << 16)
    executor.set_function(1, kernel(driver, 0xF1, 8, 8))
    good = [launch_record(1, bytes(16)), memset_record(base, 64, 3), dtod_record(base + 64, base, 64),
            htod_record(base + 128, b"x" * 40)]
    # Truncated: a header cut short, parameters cut short.
    for data in (good[0][:20], good[0][:50]):
        assert executor.run(data, 0, 1, str) == (0, 1, None)
    assert executor.run(b"", 0, 3, str) == (0, 3, None)
    rng = random.Random(1234)
    for _ in range(3000):
        data = bytearray(b"".join(rng.choice(good) for _ in range(rng.randint(1, 6))))
        for _ in range(rng.randint(1, 8)):  # random bytes anywhere, lengths and pointers included
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data[:rng.randint(0, len(data))])
        offset, left = 0, rng.randint(0, 8)
        while left:
            offset, left, _ = executor.run(data, offset, left, str)
            if left:  # Python's record: what the server does with one it cannot parse is raise
                break
        assert offset <= len(data)
    driver.stand_in_reset()  # the log holds at most 4096 calls


def test_executor_opening_a_library_without_the_driver_says_so(driver):
    with pytest.raises(OSError, match="GPU 2: the batch executor cannot start: cannot open /no/such/libcuda"):
        BatchExecutor(2, PROPERTIES, "/no/such/libcuda.so.1")
    with pytest.raises(OSError, match="has no cuCtxGetCurrent"):
        BatchExecutor(2, PROPERTIES, ctypes.util.find_library("m") or "libm.so.6")


# ---------------------------------------------------------------- through the server's handler


def test_a_server_told_so_runs_every_record_through_python(driver, monkeypatch):
    """RCUDA_BATCH_EXECUTOR=python: no executor, for measuring both side by side."""
    pool = PinnedPool()
    monkeypatch.setitem(sys.modules, "cupy", pool.module())
    monkeypatch.setattr(cuda_batches, "DRIVER_LIBRARY", driver.path)
    gpu = pool.gpu()
    assert cupy_backend.CupyDevice(gpu, gpu, 0, None, None).batch_executor is not None
    monkeypatch.setenv(cuda_batches.SWITCH_VARIABLE, "python")
    assert cupy_backend.CupyDevice(gpu, gpu, 0, None, None).batch_executor is None


def test_the_server_runs_batches_in_c_and_explains_what_it_refuses(driver, service):
    handle = service._handlers
    gpu = service.gpu
    ran = []
    image = gpu.image({"axpy": (lambda params, gpu: ran.append(params), ParamLayout((0, 8), (8, 4)))})
    handle["module"]({"module": "m"}, [types.SimpleNamespace(buffer=memoryview(image))])
    handle["function"]({"fn": 4, "module": "m", "name": "axpy", "offsets": [0, 8], "sizes": [8, 4]}, [])
    handle["stream_create"]({"stream": 9, "flags": 0, "priority": 0}, [])
    stream = service.device._streams[9]
    axpy = service._functions[4][0].handle
    image_layout(driver, axpy, ParamLayout((0, 8), (8, 4)))

    def launches(*records):
        data = b"".join(records)
        return handle["launches"]({"count": len(records)}, [types.SimpleNamespace(buffer=memoryview(data))])

    params = struct.pack("<Qi", 0x1234, 7)
    launches(launch_record(4, params, stream=9), launch_record(4, params, (2, 1, 1)))
    assert [(c.function, c.stream, c.grid[0]) for c in calls(driver)] == [(axpy, stream, 1), (axpy, None, 2)]
    assert ran == []  # C launched them, not the backend's Python launch
    # A launch C hands back is refused by Python, naming the limit; the rest runs.
    with pytest.raises(CudaError) as refused:
        launches(launch_record(4, params, block=(2048, 1, 1)), launch_record(4, params))
    assert refused.value.status == cudaError.cudaErrorInvalidConfiguration and "1024" in str(refused.value)
    assert len(calls(driver)) == 3
    # A driver error names the kernel; a sticky one stops the batch.
    driver.stand_in_fail(axpy, 700)
    with pytest.raises(CudaError, match="launch of kernel axpy on GPU 0: CUDA_ERROR_ILLEGAL_ADDRESS"):
        launches(launch_record(4, params), launch_record(4, params))
    with pytest.raises(Exception, match="truncated record"):
        launches(launch_record(4, params)[:30])


# ---------------------------------------------------------------- on a GPU


@pytest.fixture
def gpu():
    from test_backends import cupy_unavailable
    if reason := cupy_unavailable():
        pytest.skip(reason)
    from rcuda.server.backends import create_backend
    from rcuda.server.backends.base import VA_WINDOW_SIZE
    backend = create_backend("cupy", 1)
    window = backend.reserve(0, VA_WINDOW_SIZE, 0x2000_0000_0000)
    device = backend.open_device(0, window)
    yield device
    device.close()
    window.release()


def test_batches_run_through_the_driver_on_a_gpu(gpu, module_image):
    from test_backends import fetch
    executor = gpu.batch_executor
    assert executor is not None, "the cupy backend runs its batches in C"
    gpu.load_module("m", module_image)
    offsets, sizes = (0, 24), (24, 8)  # gridConstant(const __grid_constant__ P p, int *out): out[0] = p.b
    function = gpu.get_function("m", "_Z12gridConstant1PPi", ParamLayout(offsets, sizes))
    executor.set_function(1, function)
    gpu.stream_create(5, 0, 0)
    out = gpu.malloc(4096)

    def p(b: int, where: int) -> bytes:
        return struct.pack("<di12xQ", 1.5, b, where)

    batch = (memset_record(out, 4096, 0x11, 5) + launch_record(1, p(77, out), stream=5)
             + launch_record(1, p(-9, out + 4)) + htod_record(out + 8, b"abcdefgh", 5)
             + dtod_record(out + 100, out + 8, 8, 5))
    assert executor.run(batch, 0, 5, str) == (len(batch), 0, None)
    data = fetch(gpu, out, 108, 5)
    assert struct.unpack_from("<ii", data) == (77, -9)
    assert data[8:16] == data[100:108] == b"abcdefgh" and data[16:100] == b"\x11" * 84
