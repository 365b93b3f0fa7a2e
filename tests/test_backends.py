"""The backend interface (server/backends/base.py), the same checks on every
backend: sim always, cupy where a GPU is usable (skipped, saying why,
elsewhere).  Modules are real nvcc output (tests/cuda_sources/fatbin_kernels.cu)."""
from __future__ import annotations

import struct
import time
from pathlib import Path

import numpy as np
import pytest

from rcuda import fatbin
from rcuda.errors import CudaError, cudaError
from rcuda.server.backends.arrays import ArraySpec, Place
from rcuda.server.backends import create_backend
from rcuda.server.backends import sim
from rcuda.server.backends.base import Completion, ParamLayout, VA_WINDOW_SIZE

TESTS = Path(__file__).resolve().parent
VA_BASE = 0x2000_0000_0000


def cupy_unavailable() -> str | None:
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
        return "cupy sees no GPU"
    except Exception as exc:  # noqa: BLE001 - ImportError, no driver, ...
        return f"no usable GPU for the cupy backend ({type(exc).__name__}: {exc})"


def wait(completion: Completion, limit: float = 30.0) -> None:
    """What the device service does with a Completion, in a test: wait until
    it is ready (until its deadline where it has one), then release it."""
    assert isinstance(completion, Completion)
    give_up = time.perf_counter() + limit
    try:
        while not completion.ready():
            now = time.perf_counter()
            assert now < give_up, f"{completion!r} not ready after {limit} s"
            deadline = completion.deadline()
            time.sleep(min(max(deadline - now, 0.0), 0.05) if deadline is not None else 0.001)
    finally:
        completion.release()


def fetch(device, src: int, size: int, stream: int = 0) -> bytes:
    """cudaMemcpy to the host: the bytes, once the copy is done."""
    data, done = device.memcpy_dtoh(src, size, stream)
    wait(done)
    return bytes(data)


@pytest.fixture(params=["sim", "cupy"])
def device(request):
    if request.param == "cupy" and (reason := cupy_unavailable()):
        pytest.skip(reason)
    backend = create_backend(request.param, 1, [str(TESTS / "cuda" / "sim_kernels.py")])
    window = backend.reserve(0, VA_WINDOW_SIZE, VA_BASE)
    device = backend.open_device(0, window)
    device.window, device.backend = window, backend
    yield device
    device.close()
    window.release()


def test_description(device):
    props = device.properties()
    attributes = device.attributes()
    assert props["totalGlobalMem"] > 0 and props["major"] >= 7
    assert attributes["cudaDevAttrMaxThreadsPerBlock"] == props["maxThreadsPerBlock"]
    assert attributes["cudaDevAttrComputeCapabilityMajor"] == props["major"]
    free, total = device.mem_get_info()
    assert 0 < free <= total


def test_memory_round_trip_inside_the_window(device):
    a, b = device.malloc(1 << 20), device.malloc(1000)
    low, high = device.window.base, device.window.base + VA_WINDOW_SIZE
    assert low <= a < high and low <= b < high
    data = np.arange(1 << 18, dtype=np.uint32)
    device.memcpy_htod(a, memoryview(data.tobytes()))
    device.memcpy_dtod(b, a + 40, 1000)
    device.memset(a, 0x7F, 16)
    back = np.frombuffer(fetch(device, a, 1 << 20), np.uint32)
    assert (back[4:] == data[4:]).all() and back[0] == 0x7F7F7F7F
    assert fetch(device, b, 1000) == data.tobytes()[40:1040]
    wait(device.free(a))
    with pytest.raises(CudaError) as error:
        device.memcpy_dtoh(a, 4)
    assert error.value.status == cudaError.cudaErrorInvalidValue
    with pytest.raises(CudaError):
        device.free(b + 8)
    wait(device.free(b))
    wait(device.free(0))  # cudaFree(NULL) does nothing


def test_batched_copies_are_checked_whole_then_made(device):
    """memcpy_dtod_batch (cudaMemcpyBatchAsync's copies within a GPU): each
    lands where it says, zero-size ones do nothing; one bad range and no
    copy of the batch is made."""
    a, b = device.malloc(4096), device.malloc(4096)
    data = bytes(range(256)) * 16
    device.memcpy_htod(a, memoryview(data))
    device.memset(b, 0, 4096)
    device.memcpy_dtod_batch([(b, a + 100, 50), (b + 1000, a, 1), (b + 2000, a, 0), (b + 4000, a + 4000, 96)])
    back = fetch(device, b, 4096)
    assert back[:50] == data[100:150] and back[1000:1001] == data[:1] and back[4000:] == data[4000:]
    assert back[50:1000] == bytes(950) and back[1001:4000] == bytes(2999)
    device.memset(b, 0, 4096)
    for bad in ([(b, a, 8), (b + 8, a + 4090, 8)], [(b, a, 8), (b + 4090, a, 8)], [(b, a, 8), (a + (1 << 30), a, 8)]):
        with pytest.raises(CudaError) as error:
            device.memcpy_dtod_batch(bad, 0)
        assert error.value.status == cudaError.cudaErrorInvalidValue
    assert fetch(device, b, 4096) == bytes(4096)


def test_mapped_memory_is_written_and_read_now(device):
    """write_now/read_now (mapped host memory's device copies): at once, in
    no stream, whatever the streams hold; ranges are checked."""
    ptr = device.malloc(1 << 16)
    data = bytes(range(256)) * 256
    device.write_now(ptr, memoryview(data))
    assert bytes(device.read_now(ptr, 1 << 16)) == data
    assert fetch(device, ptr + 100, 50) == data[100:150]  # and a stream's copy sees them
    device.memset(ptr, 9, 16)
    wait(device.synchronize())
    assert bytes(device.read_now(ptr, 20)) == b"\x09" * 16 + data[16:20]
    assert bytes(device.read_now(ptr, 0)) == b""
    for bad in (lambda: device.write_now(ptr + (1 << 16) - 2, memoryview(b"1234")),
                lambda: device.read_now(ptr - 8, 16)):
        with pytest.raises(CudaError) as error:
            bad()
        assert error.value.status == cudaError.cudaErrorInvalidValue


def test_memset_patterns(device):
    """cuMemsetD16/D32: 2- and 4-byte patterns, 1-D and 2-D, padding untouched."""
    pitch, height = 64, 3
    ptr = device.malloc(pitch * height)
    device.memset(ptr, 0x11, pitch * height)
    device.memset(ptr, 0xA1B2C3D4, 16, elem=4)
    device.memset(ptr + 16, 0x1234BEEF, 6, elem=2)  # the low 2 bytes
    device.region_memset(Place(ptr + pitch, pitch, 2), 0x01020304, (8, 2, 1), elem=4)
    back = fetch(device, ptr, pitch * height)
    assert back[:16] == bytes.fromhex("d4c3b2a1") * 4 and back[16:22] == bytes.fromhex("efbe") * 3
    assert back[22:pitch] == b"\x11" * (pitch - 22)
    for row in (1, 2):
        assert back[row * pitch:row * pitch + 8] == bytes.fromhex("04030201") * 2
        assert back[row * pitch + 8:(row + 1) * pitch] == b"\x11" * (pitch - 8)


def test_virtual_memory_mappings_share_physical_memory(device):
    """vmm_create/vmm_map: two mappings of one physical allocation share its
    bytes; it is freed once released and unmapped; bad ranges are refused,
    and a mapping from a non-zero offset too, as CUDA 13's driver refuses it
    (cuda.h: the offset "currently must be zero")."""
    granularity = device.vmm_granularity()[0]
    used = device.memory_in_use()
    vmm = device.backend.reserve(0, 16 * granularity, 0x6000_0000_0000)  # the session's VMM window
    first, second = vmm.base, vmm.base + 4 * granularity
    device.vmm_create(7, 2 * granularity)
    device.vmm_map(first, 2 * granularity, 0, 7)
    with pytest.raises(CudaError) as error:
        device.vmm_map(second, granularity, granularity, 7)
    assert error.value.status == cudaError.cudaErrorNotSupported
    device.vmm_map(second, granularity, 0, 7)  # its first half, at a second address
    device.memcpy_htod(first + 16, memoryview(b"shared"))
    assert fetch(device, second + 16, 6) == b"shared"
    device.memset(second + 8, 0xCAFE, 4, elem=2)
    assert fetch(device, first + 8, 4) == bytes.fromhex("fecafeca")
    for bad in (lambda: device.vmm_map(first, granularity, 0, 7),              # mapped already
                lambda: device.vmm_map(second + granularity, granularity, 2 * granularity, 7),  # past its end
                lambda: device.vmm_map(second + 2 * granularity, 4096, 0, 7),   # not the granularity
                lambda: device.vmm_map(second + 2 * granularity, granularity, 0, 99),  # no such handle
                lambda: device.free(first),                                      # a mapping, not cudaMalloc's
                lambda: device.vmm_unmap(first + 8)):
        with pytest.raises(CudaError) as error:
            bad()
        assert error.value.status == cudaError.cudaErrorInvalidValue
    device.vmm_release(7)  # still mapped: the memory stays
    assert fetch(device, second + 16, 6) == b"shared"
    device.vmm_unmap(first)
    device.vmm_unmap(second)
    assert device.memory_in_use() == used
    with pytest.raises(CudaError):
        device.vmm_release(7)
    vmm.release()


def test_two_d_copies(device):
    width, height, pitch = 24, 5, 64
    base = device.malloc(pitch * height)
    rows = bytes(range(width)) * height
    device.region_memset(Place(base, pitch, height), 0xEE, (pitch, height, 1))
    device.region_htod(Place(base, pitch, height), (width, height, 1), memoryview(rows))
    data, done = device.region_dtoh(Place(base, pitch, height), (width, height, 1))
    wait(done)
    assert bytes(data) == rows
    full = fetch(device, base, pitch * height)
    assert full[width:pitch] == b"\xee" * (pitch - width)  # the padding is untouched


def test_three_d_boxes_between_linear_memory_and_arrays(device):
    """A 3-D box into a 3-D array at an offset, out again, and across to
    pitched linear memory; a box past the array's end moves nothing."""
    spec = ArraySpec("float32", 2, 8, 4, 3, 0)  # 8 x 4 x 3 float2 texels: rows of 64 bytes
    device.array_create(1, spec)
    box = bytes(range(32)) * 2 * 2  # 32 bytes by 2 rows by 2 slices
    device.region_htod(Place(array=1, x=16, y=1, z=1), (32, 2, 2), memoryview(box))
    data, done = device.region_dtoh(Place(array=1, x=16, y=1, z=1), (32, 2, 2))
    wait(done)
    assert bytes(data) == box
    pitch = 128
    linear = device.malloc(pitch * 2 * 2)
    device.region_dtod(Place(linear, pitch, 2), Place(array=1, x=16, y=1, z=1), (32, 2, 2))
    full = fetch(device, linear, pitch * 4)
    assert all(full[row * pitch:row * pitch + 32] == bytes(range(32)) for row in range(4))
    for bad in (Place(array=1, x=48, y=0, z=0),   # runs past a row
                Place(array=1, x=4, y=0, z=0),    # not a whole texel
                Place(array=1, x=0, y=3, z=2)):   # past the rows and slices
        with pytest.raises(CudaError) as error:
            device.region_htod(bad, (32, 2, 2), memoryview(box))
        assert error.value.status == cudaError.cudaErrorInvalidValue
    with pytest.raises(CudaError) as error:
        device.region_dtoh(Place(array=2), (8, 1, 1))
    assert error.value.status == cudaError.cudaErrorInvalidResourceHandle
    device.array_destroy(1)


def test_streams_and_events(device):
    device.stream_create(5, 1, 0)
    device.event_create(1, 0)
    device.event_create(2, 0)
    device.event_create(3, 2)  # cudaEventDisableTiming
    with pytest.raises(CudaError) as never:
        device.event_elapsed_ms(1, 2)
    assert never.value.status == cudaError.cudaErrorInvalidResourceHandle
    device.event_record(1, 5)
    ptr = device.malloc(1 << 20)
    device.memset(ptr, 1, 1 << 20, 5)
    device.event_record(2, 0)
    device.stream_wait_event(5, 2)
    device.event_record(3, 5)
    wait(device.stream_synchronize(5))
    wait(device.event_synchronize(2))
    assert device.stream_query(5) and device.event_query(2)
    assert device.event_elapsed_ms(1, 2) >= 0
    with pytest.raises(CudaError):
        device.event_elapsed_ms(1, 3)
    device.stream_destroy(5)
    for event in (1, 2, 3):
        device.event_destroy(event)
    wait(device.synchronize())


def test_module_symbols_and_kernels(device, module_image):
    device.load_module("m", module_image)
    address, size = device.get_symbol("m", "initd")
    assert size == 4
    assert struct.unpack("<i", fetch(device, address, 4))[0] == 5  # __device__ int initd = 5
    with pytest.raises(CudaError) as missing:
        device.get_symbol("m", "no_such_variable")
    assert missing.value.status in (cudaError.cudaErrorInvalidSymbol, cudaError.cudaErrorSymbolNotFound)

    kernel = fatbin.parse_fatbin(module_image).kernels()["_Z4fillIiEvPT_S0_i"]
    layout = ParamLayout(tuple(p.offset for p in kernel.params), tuple(p.size for p in kernel.params))
    function = device.get_function("m", kernel.name, layout)
    attrs = device.function_attributes(function)
    assert attrs["maxThreadsPerBlock"] > 0 and attrs["numRegs"] > 0
    out = device.malloc(4 * 100)
    device.launch(function, (1, 1, 1), (128, 1, 1), struct.pack("<Qii", out, 42, 100), 0, 0)
    wait(device.synchronize())
    assert (np.frombuffer(fetch(device, out, 400), np.int32) == 42).all()


def test_largest_parameter_block_plain_and_cooperative(device, module_image):
    """CUDA's 32,764 bytes of parameters reach the kernel whole, launched
    plainly and cooperatively (on cupy: cuLaunchKernel's packed buffer, and
    cuLaunchCooperativeKernel's pointer per parameter)."""
    device.load_module("m", module_image)
    kernel = fatbin.parse_fatbin(module_image).kernels()["_Z7largest4HugePii"]
    layout = ParamLayout(tuple(p.offset for p in kernel.params), tuple(p.size for p in kernel.params))
    assert layout.buffer_size == 32764
    function = device.get_function("m", kernel.name, layout)
    out = device.malloc(4)
    huge = np.arange(8188, dtype=np.int32) * 3 + 1
    for cooperative, n in ((False, 8187), (True, 4321)):
        device.launch(function, (1, 1, 1), (1, 1, 1), huge.tobytes() + struct.pack("<Qi", out, n), 0, 0,
                      cooperative=cooperative)
        wait(device.synchronize())
        assert struct.unpack("<i", fetch(device, out, 4))[0] == huge[n]



# ---------------------------------------------------------------- the sim's modelled GPU time
# Deadlines are exact in the model, so these tests assert on them rather
# than on wall time, and sleep only where a Completion must really be waited
# for.  The sim's results are computed at launch: only time is modelled.

QUEUE_PLUGIN = '''
import time
import numpy as np

def no_params(launch):
    time.sleep(launch.block[0] / 1000)  # simulating it takes block.x ms of the CPU

def fill(launch):
    out, value, n = launch.param(0, "Q"), launch.param(1, "i"), launch.param(2, "i")
    launch.array(out, np.int32, n)[:] = value

KERNELS = {"noParams": no_params, "fill<int>": fill}
COSTS = {"noParams": lambda launch: launch.grid[0] / 1000}  # the emulated GPU takes grid.x ms
'''

BLOCKING, NON_BLOCKING = 0, 1  # cudaStreamDefault, cudaStreamNonBlocking


class Modelled:
    """A sim device whose kernel noParams<<<G, B>>> takes G ms of emulated GPU
    time and B ms of the CPU to simulate, and fill<int> takes no modelled time."""

    def __init__(self, plugin: Path, module_image: bytes):
        self.device = create_backend("sim", 1, [str(plugin)]).open_device(0)
        self.device.load_module("m", module_image)
        self.no_params = self.device.get_function("m", "_Z8noParamsv", ParamLayout((), ()))
        kernel = fatbin.parse_fatbin(module_image).kernels()["_Z4fillIiEvPT_S0_i"]
        self.fill_int = self.device.get_function(
            "m", kernel.name, ParamLayout(tuple(p.offset for p in kernel.params), tuple(p.size for p in kernel.params)))

    def launch(self, gpu_ms: int, cpu_ms: int = 1, stream: int = 0) -> float:
        """Launch noParams; returns perf_counter() just before the call (the
        kernel arrives later, so its modelled end is at least `gpu_ms` after)."""
        before = time.perf_counter()
        self.device.launch(self.no_params, (gpu_ms, 1, 1), (cpu_ms, 1, 1), b"", 0, stream)
        return before

    def fill(self, ptr: int, value: int, n: int, stream: int = 0) -> None:
        self.device.launch(self.fill_int, (1, 1, 1), (n, 1, 1), struct.pack("<Qii", ptr, value, n), 0, stream)

    def streams(self, *flags: int) -> list[int]:
        ids = list(range(1, len(flags) + 1))
        for stream, f in zip(ids, flags):
            self.device.stream_create(stream, f, 0)
        return ids


@pytest.fixture
def make_modelled(tmp_path, module_image):
    plugin = tmp_path / "queue_kernels.py"
    plugin.write_text(QUEUE_PLUGIN)
    made = []

    def make() -> Modelled:
        made.append(Modelled(plugin, module_image))
        return made[-1]

    yield make
    for m in made:
        m.device.close()


@pytest.fixture
def modelled(make_modelled) -> Modelled:
    return make_modelled()


def test_sim_without_costs_never_waits(device):
    """No COSTS (tests/cuda/sim_kernels.py has none): every Completion is
    ready at once, as the sim always was."""
    if not isinstance(device, sim.SimDevice):
        pytest.skip("the sim's model")
    device.stream_create(1, BLOCKING, 0)
    device.event_create(1, 0)
    ptr = device.malloc(64)
    device.memset(ptr, 3, 64, 1)
    device.event_record(1, 1)
    data, done = device.memcpy_dtoh(ptr, 64, 1)
    completions = [done, device.stream_synchronize(1), device.stream_synchronize(0), device.synchronize(),
                   device.event_synchronize(1), device.free(ptr)]
    assert all(c.ready() and c.deadline() == 0.0 for c in completions)
    assert bytes(data) == b"\x03" * 64
    assert device.stream_query(0) and device.stream_query(1) and device.event_query(1)


def test_sim_modelled_time_is_waited_for_by_whatever_observes_the_stream(modelled):
    device = modelled.device
    before = modelled.launch(300)
    assert time.perf_counter() - before < 0.15  # the launch itself does not wait
    assert device.stream_query(0) is False
    done = device.synchronize()
    assert not done.ready() and done.deadline() >= before + 0.3
    wait(done)
    assert time.perf_counter() - before >= 0.3
    assert device.stream_query(0) is True

    before = modelled.launch(150)
    modelled.launch(150)  # queued behind the first, in the same stream
    out = device.malloc(4)
    data, copied = device.memcpy_dtoh(out, 4)  # a copy waits for the stream's work
    assert not copied.ready() and copied.deadline() >= before + 0.3
    assert copied.deadline() == device.stream_synchronize(0).deadline()
    wait(copied)
    assert bytes(data) == bytes(4)


def test_sim_a_synchronisation_of_an_idle_stream_does_not_wait_for_another(modelled):
    device = modelled.device
    busy, idle = modelled.streams(BLOCKING, BLOCKING)
    device.event_create(1, 0)
    ptr = device.malloc(16)
    before = modelled.launch(300, stream=busy)
    assert device.stream_synchronize(idle).ready() and device.stream_query(idle)
    device.memset(ptr, 1, 16, idle)
    data, copied = device.memcpy_dtoh(ptr, 16, idle)
    assert copied.ready() and bytes(data) == b"\x01" * 16
    device.event_record(1, idle)
    assert device.event_query(1) and device.event_synchronize(1).ready()

    waiting = device.stream_synchronize(busy)
    assert not waiting.ready() and not device.stream_query(busy)
    assert waiting.deadline() >= before + 0.3
    assert device.synchronize().deadline() == waiting.deadline()


def test_sim_kernels_of_two_streams_overlap(modelled):
    device = modelled.device
    one, two = modelled.streams(BLOCKING, NON_BLOCKING)
    before = modelled.launch(200, stream=one)
    modelled.launch(200, stream=two)
    ends = [device.stream_synchronize(s).deadline() for s in (one, two)]
    assert all(end >= before + 0.2 for end in ends)
    everything = device.synchronize()
    assert everything.deadline() == max(ends)
    assert everything.deadline() < before + 0.3  # one after the other would be 400 ms
    wait(everything)
    assert time.perf_counter() - before >= 0.2
    assert device.stream_query(one) and device.stream_query(two)


def test_sim_simulation_overlaps_the_modelled_time_of_earlier_kernels(modelled):
    """A GPU runs queued kernels while the host goes on: simulating a kernel
    on the CPU overlaps the modelled time of the kernels before it (were it
    added, it would be 450 ms here)."""
    before = modelled.launch(200, cpu_ms=1)  # 200 ms of emulated GPU time, queued
    modelled.launch(50, cpu_ms=200)          # simulated meanwhile, then 50 ms more of GPU time
    done = modelled.device.synchronize()
    assert before + 0.25 <= done.deadline() < before + 0.3
    wait(done)
    assert time.perf_counter() - before >= 0.25


def test_sim_legacy_default_stream(modelled):
    """Stream 0 waits for the blocking streams' earlier work and they for its;
    a non-blocking stream waits for neither."""
    device = modelled.device
    blocking, other_blocking, non_blocking = modelled.streams(BLOCKING, BLOCKING, NON_BLOCKING)
    ptr = device.malloc(4)
    before = modelled.launch(300, stream=blocking)
    assert not device.stream_query(0)  # stream 0 waits for the blocking stream
    assert device.stream_synchronize(0).deadline() >= before + 0.3
    assert device.stream_query(other_blocking) and device.stream_query(non_blocking)

    modelled.launch(100, stream=0)  # starts once the blocking stream's kernel ends
    legacy_end = device.stream_synchronize(0).deadline()
    assert legacy_end >= device.stream_synchronize(blocking).deadline() + 0.1
    _, copied = device.memcpy_dtoh(ptr, 4, other_blocking)  # a blocking stream waits for stream 0
    assert copied.deadline() == legacy_end
    modelled.launch(100, stream=other_blocking)
    assert device.stream_synchronize(other_blocking).deadline() >= legacy_end + 0.1

    _, copied = device.memcpy_dtoh(ptr, 4, non_blocking)  # independent of stream 0
    assert copied.ready()
    modelled.launch(100, stream=non_blocking)
    assert device.stream_synchronize(non_blocking).deadline() < before + 0.3
    assert device.synchronize().deadline() == device.stream_synchronize(other_blocking).deadline()


def test_sim_a_destroyed_streams_work_still_counts(modelled):
    device = modelled.device
    (stream,) = modelled.streams(BLOCKING)
    before = modelled.launch(300, stream=stream)
    device.stream_destroy(stream)
    assert device.synchronize().deadline() >= before + 0.3
    assert device.stream_synchronize(0).deadline() >= before + 0.3  # a blocking stream's work


def test_sim_stream_wait_event(modelled):
    device = modelled.device
    producer, consumer, bystander = modelled.streams(NON_BLOCKING, NON_BLOCKING, NON_BLOCKING)
    device.event_create(1, 0)
    device.event_create(2, 0)
    device.stream_wait_event(consumer, 2)  # never recorded: waits for nothing
    assert device.stream_query(consumer)
    before = modelled.launch(300, stream=producer)
    device.event_record(1, producer)
    recorded = device.event_synchronize(1)
    assert not device.event_query(1) and recorded.deadline() >= before + 0.3
    assert recorded.deadline() == device.stream_synchronize(producer).deadline()

    device.stream_wait_event(consumer, 1)
    assert not device.stream_query(consumer)
    assert device.stream_synchronize(consumer).deadline() == recorded.deadline()
    modelled.launch(100, stream=consumer)  # starts when the event happens
    assert device.stream_synchronize(consumer).deadline() >= recorded.deadline() + 0.1
    assert device.stream_query(bystander)


def test_sim_a_deferred_copy_to_the_host_has_the_bytes_of_its_place_in_issue_order(modelled):
    device = modelled.device
    slow, fast = modelled.streams(NON_BLOCKING, NON_BLOCKING)
    ptr = device.malloc(16)
    modelled.fill(ptr, 1, 4, slow)
    modelled.launch(300, stream=slow)
    data, copied = device.memcpy_dtoh(ptr, 16, slow)  # behind the 300 ms kernel
    assert not copied.ready()
    modelled.fill(ptr, 7, 4, fast)  # issued later, on another stream: runs now, in issue order
    _, done = device.memcpy_dtoh(ptr, 16, fast)
    assert done.ready() and fetch(device, ptr, 16, fast) == struct.pack("<4i", 7, 7, 7, 7)
    assert bytes(data) == struct.pack("<4i", 1, 1, 1, 1)  # the copy's bytes stay as it made them
    later, _ = device.memcpy_dtoh(ptr, 16, slow)
    assert bytes(later) == struct.pack("<4i", 7, 7, 7, 7)


def test_sim_concurrent_kernels_are_limited(make_modelled, monkeypatch):
    assert sim.MAX_CONCURRENT_KERNELS == 128
    monkeypatch.setattr(sim, "MAX_CONCURRENT_KERNELS", 2)
    modelled = make_modelled()
    device = modelled.device
    streams = modelled.streams(NON_BLOCKING, NON_BLOCKING, NON_BLOCKING)
    before = modelled.launch(200, stream=streams[0])
    modelled.launch(250, stream=streams[1])
    modelled.launch(200, stream=streams[2])  # both places taken: starts when the first kernel ends
    first, second, third = (device.stream_synchronize(s).deadline() for s in streams)
    assert second < before + 0.3
    assert third == pytest.approx(first + 0.2, abs=1e-9) and third >= before + 0.4
    modelled.launch(100, stream=streams[0])  # no place is free when its stream is: it waits for the second
    assert device.stream_synchronize(streams[0]).deadline() == pytest.approx(second + 0.1, abs=1e-9)
    with pytest.raises(ValueError):
        sim.SimDevice(0, VA_BASE, 1 << 20, modelled.device._kernels, max_concurrent_kernels=0)


def test_sim_event_elapsed_time_is_not_ready_before_the_end_happens(modelled):
    device = modelled.device
    start, end = 1, 2
    device.event_create(start, 0)
    device.event_create(end, 0)
    device.event_record(start, 0)
    modelled.launch(200)
    device.event_record(end, 0)
    assert device.event_query(start) and not device.event_query(end)
    with pytest.raises(CudaError) as error:
        device.event_elapsed_ms(start, end)
    assert error.value.status == cudaError.cudaErrorNotReady
    wait(device.event_synchronize(end))
    assert device.event_query(end)
    assert 200 <= device.event_elapsed_ms(start, end) < 350  # the modelled time


def test_sim_free_forgets_the_allocation_at_once_and_completes_with_the_device(modelled):
    device = modelled.device
    (stream,) = modelled.streams(NON_BLOCKING)
    ptr = device.malloc(1 << 20)
    in_use = device.memory_in_use()
    before = modelled.launch(300, stream=stream)
    freed = device.free(ptr)
    assert not freed.ready() and freed.deadline() >= before + 0.3  # cudaFree waits for the device
    assert freed.deadline() == device.synchronize().deadline()
    assert device.memory_in_use() == in_use - (1 << 20)
    for use in (lambda: device.memcpy_dtoh(ptr, 4), lambda: device.memset(ptr, 0, 4), lambda: device.free(ptr)):
        with pytest.raises(CudaError) as error:
            use()
        assert error.value.status == cudaError.cudaErrorInvalidValue


def test_sim_a_lane_upload_given_its_stream_takes_its_place_there(modelled):
    """host_view with the copy's stream: the copy is ordered there in modelled
    time (on stream 0 behind the blocking streams, which then wait for it)."""
    device = modelled.device
    busy, later = modelled.streams(BLOCKING, BLOCKING)
    ptr = device.malloc(4)
    modelled.launch(300, stream=busy)
    device.host_view(ptr, 4)[:] = b"\x01\x02\x03\x04"  # no stream given: no place in modelled time
    _, copied = device.memcpy_dtoh(ptr, 4, later)
    assert copied.ready()
    device.host_view(ptr, 4, stream=0)[:] = b"\x05\x06\x07\x08"
    data, copied = device.memcpy_dtoh(ptr, 4, later)  # a blocking stream waits for stream 0's copy
    assert copied.deadline() == device.stream_synchronize(busy).deadline()
    assert bytes(data) == b"\x05\x06\x07\x08"


TEXTURE_DESC = {"addressMode": [1, 1, 1], "filterMode": 0, "readMode": 0, "sRGB": 0, "borderColor": [0.0] * 4,
                "normalizedCoords": 0, "maxAnisotropy": 0, "mipmapFilterMode": 0, "mipmapLevelBias": 0.0,
                "minMipmapLevelClamp": 0.0, "maxMipmapLevelClamp": 0.0, "disableTrilinearOptimization": 0,
                "seamlessCubemap": 0}


def test_sim_texture_objects_show_their_texels_until_destroyed(device):
    """What a plugin's launch.texture(i) / launch.surface(i) get, and a
    destroyed object (or its freed array) in a launch: an illegal address."""
    if not isinstance(device, sim.SimDevice):
        pytest.skip("the plugin interface is the sim's")
    from rcuda.server.backends.sim_plugins import IllegalAddress

    device.array_create(1, ArraySpec("float32", 2, 4, 3, 0, 0x02))  # 4 x 3 float2, surface load/store
    texels = np.arange(24, dtype=np.float32)
    device.region_htod(Place(array=1), (32, 3, 1), memoryview(texels.tobytes()))
    texture = device.texture_create({"type": "array", "array": 1, "level": 0}, TEXTURE_DESC, None)
    surface = device.surface_create({"type": "array", "array": 1, "level": 0})
    view = device.arrays.lookup(texture, False, "k")
    assert view.data.shape == (3, 4, 2) and view.data.dtype == np.float32 and not view.data.flags.writeable
    assert view.data[2, 3, 1] == 23 and view.resource == "array" and view.desc["addressMode"] == [1, 1, 1]
    device.arrays.lookup(surface, True, "k").data[0, 0, 0] = 99  # a surface writes the array
    assert device.arrays.lookup(texture, False, "k").data[0, 0, 0] == 99
    with pytest.raises(IllegalAddress):
        device.arrays.lookup(texture, True, "k")  # a texture is no surface
    device.texture_destroy(texture)
    with pytest.raises(IllegalAddress):
        device.arrays.lookup(texture, False, "k")
    with pytest.raises(CudaError) as twice:
        device.texture_destroy(texture)
    assert twice.value.status == cudaError.cudaErrorInvalidValue
    device.array_destroy(1)
    with pytest.raises(IllegalAddress):
        device.arrays.lookup(surface, True, "k")  # its array is gone
    # An array without cudaArraySurfaceLoadStore: the client refuses it
    # (tests/test_textures.py); the server takes it, as a GPU's driver does.
    device.array_create(2, ArraySpec("float32", 1, 4, 4, 0, 0))
    taken = device.surface_create({"type": "array", "array": 2, "level": 0})
    assert device.arrays.lookup(taken, True, "k").data.shape == (4, 4)
