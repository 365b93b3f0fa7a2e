"""The cupy backend's order on a GPU, against a stand-in for CuPy and the
driver (tests/fake_cuda.py) that runs work lazily, in the order CUDA
documents and no other: what the sim, running each request at once, hides.

- tests/cuda/mapped_memory.cu's nonblocking_stream (issue 31 on an H100):
  with a kernel running on the legacy stream, the host's writes to mapped
  memory, a kernel on a non-blocking stream launched for the first time, and
  the download of its result wait for nothing.  Two of CUDA's implicit
  synchronisations stood in the way: loading a kernel lazily at its first
  launch, and allocating pinned staging (a size CuPy's pool had no buffer of).
- Peer copies (server/peer.py): each half runs in the copy's stream, the
  source's read after the work before it there, the destination's write
  after the work before it there and before the work after it."""
from __future__ import annotations

import struct
import sys
import types

import numpy as np
import pytest

from fake_cuda import NON_BLOCKING, PinnedPool
from rcuda import protocol
from rcuda.client.transport.peer import PeerCopies
from rcuda.errors import CudaError, cudaError
from rcuda.server.backends import cuda_jit, cupy_backend
from rcuda.server.backends.base import ParamLayout
from rcuda.server.peer import Inbox, PeerOps

ONE = (1, 1, 1)
TOKEN = "peer-token"


@pytest.fixture
def pool(monkeypatch):
    """Host memory the fake GPUs share: CuPy's pinned pool, what `import cupy` gives."""
    pool = PinnedPool()
    monkeypatch.setitem(sys.modules, "cupy", pool.module())
    return pool


def open_gpu(pool):
    gpu = pool.gpu()
    return gpu, cupy_backend.CupyDevice(gpu, gpu, 0, None, None)


def finish(completion) -> None:
    completion.wait()
    completion.release()


def words(count: int) -> ParamLayout:
    """A kernel's layout of `count` 8-byte parameters, client's and image's alike."""
    return ParamLayout(tuple(range(0, 8 * count, 8)), (8,) * count)


def launch(device, function, stream: int, *words: int) -> None:
    device.launch(function, ONE, ONE, struct.pack(f"<{len(words)}Q", *words), 0, stream)


def copy_kernel(params: bytes, gpu) -> None:
    """copy(dst, src, size)"""
    dst, src, size = struct.unpack("<3Q", params)
    gpu.write(dst, gpu.read(src, size))


def fill_kernel(params: bytes, gpu) -> None:
    """fill(dst, size, byte)"""
    dst, size, value = struct.unpack("<3Q", params)
    gpu.write(dst, bytes([value]) * size)


# ---------------------------------------------------------------- mapped memory


def test_nonblocking_stream_waits_for_no_running_kernel(pool, monkeypatch):
    gpu, device = open_gpu(pool)
    monkeypatch.setattr(cuda_jit, "_driver", lambda: gpu.libcuda)
    device.load_module("m", gpu.image({"longKernel": (lambda params, gpu: None, words(2)),
                                         "copyInts": (copy_kernel, words(3))}))
    long_kernel = device.get_function("m", "longKernel", words(2))
    flag, host_in, host_out = device.malloc(4), device.malloc(4000), device.malloc(4000)
    device.stream_create(1, NON_BLOCKING, 0)
    finish(device.synchronize())

    gpu.hold("longKernel")  # running for 1.5 s, on the legacy stream
    launch(device, long_kernel, 0, flag, 1_500_000_000)
    values = (np.arange(1000, dtype=np.int32) * 3 + 1).tobytes()
    device.write_now(host_in, memoryview(values))  # the host's writes, sent before the next launch
    copy_ints = device.get_function("m", "copyInts", words(3))  # its first launch registers it
    launch(device, copy_ints, 1, host_out, host_in, 4000)
    finish(device.stream_synchronize(1))
    assert bytes(device.read_now(host_out, 4000)) == values  # for the host copy, after the synchronisation

    gpu.release("longKernel")
    finish(device.synchronize())


# ---------------------------------------------------------------- peer copies


class Service:
    """What PeerOps uses of its DeviceService."""

    def __init__(self, device, streams):
        self.device, self.streams, self.index, self.sticky = device, set(streams), 0, None
        self.notices = []

    def stopping(self) -> bool:
        return False

    def stream_id(self, header: dict) -> int:
        if header["stream"] not in self.streams:
            raise CudaError(cudaError.cudaErrorInvalidResourceHandle, f"unknown stream {header['stream']}")
        return header["stream"]

    def notify(self, message: dict) -> None:
        self.notices.append(message)


def peer_copy(source, src_stream: int, destination, dst_stream: int, src: int, dst: int, size: int) -> None:
    """A copy between two GPUs of one worker, as the client posts it: the
    push (which files the bytes in the inbox), then the wait."""
    inbox = Inbox()
    pushing = PeerOps(Service(source, [0, src_stream]), inbox, TOKEN)
    pushing.push({"xfer": 1, "src": src, "size": size, "endpoint": "tcp://127.0.0.1:1", "token": TOKEN,
                  "dest": "GPU1", "timeout": 5, "stream": src_stream}, [])
    assert pushing.service.notices == []
    PeerOps(Service(destination, [0, dst_stream]), inbox, TOKEN).wait(
        {"xfer": 1, "dst": dst, "size": size, "source": "here", "stream": dst_stream}, [])


#: Two chunks, each through pinned staging (server/backends/cupy_backend.py's STAGE_UPLOADS_FROM).
SIZE = protocol.CHUNK_SIZE * 3 // 2


def warm(pool) -> None:
    """A server that ran a while: its pinned pool holds buffers of the
    chunks' sizes (a new size is an implicit synchronisation, which would
    run what it is issued after)."""
    pool.warm(*[protocol.CHUNK_SIZE, SIZE - protocol.CHUNK_SIZE] * 2)


def test_a_peer_copy_reads_its_source_after_the_work_before_it_in_its_stream(pool):
    source_gpu, source = open_gpu(pool)
    gpu, device = open_gpu(pool)
    warm(pool)
    src, dst = source.malloc(SIZE), device.malloc(SIZE)
    source.stream_create(1, NON_BLOCKING, 0)
    fill = cupy_backend.CupyFunction(source_gpu.kernel("fill", fill_kernel, words(3)), "fill", words(3))
    launch(source, fill, 1, src, SIZE, 7)
    peer_copy(source, 1, device, 0, src, dst, SIZE)  # cudaMemcpyPeerAsync(dst, 1, src, 0, SIZE, stream 1 of GPU0)
    finish(device.synchronize())
    assert gpu.read(dst, SIZE) == b"\x07" * SIZE


def test_a_peer_copy_is_written_between_the_work_around_it_in_its_stream(pool):
    source_gpu, source = open_gpu(pool)
    gpu, device = open_gpu(pool)
    warm(pool)
    src = source.malloc(SIZE)
    source_gpu.write(src, b"\x07" * SIZE)
    dst, before, after = device.malloc(SIZE), device.malloc(SIZE), device.malloc(SIZE)
    gpu.write(dst, b"\x01" * SIZE)
    device.stream_create(1, NON_BLOCKING, 0)
    copy = cupy_backend.CupyFunction(gpu.kernel("copy", copy_kernel, words(3)), "copy", words(3))
    launch(device, copy, 1, before, dst, SIZE)  # earlier work in the stream reads the destination
    peer_copy(source, 0, device, 1, src, dst, SIZE)  # cudaMemcpyPeerAsync(dst, 1, src, 0, SIZE, stream 1 of GPU1)
    launch(device, copy, 1, after, dst, SIZE)  # later work reads the bytes
    finish(device.stream_synchronize(1))
    assert gpu.read(before, SIZE) == b"\x01" * SIZE
    assert gpu.read(after, SIZE) == b"\x07" * SIZE


def test_each_half_of_a_copy_in_a_stream_runs_in_it_on_its_gpu():
    """The client's side: the stream's id on the GPU it belongs to, the
    legacy stream on the other; no stream (cudaMemcpyPeer), both legacy."""
    src, dst, third = (types.SimpleNamespace(sinks={}) for _ in range(3))
    stream = lambda device, id: types.SimpleNamespace(device=device, id=id)  # noqa: E731
    assert PeerCopies._streams(None, src, dst, "cudaMemcpyPeer") == (0, 0)
    assert PeerCopies._streams(stream(src, 0), src, dst, "cudaMemcpyPeerAsync") == (0, 0)
    assert PeerCopies._streams(stream(src, 5), src, dst, "cudaMemcpyPeerAsync") == (5, 0)
    assert PeerCopies._streams(stream(dst, 6), src, dst, "cudaMemcpyPeerAsync") == (0, 6)
    waited = []
    third.request = lambda op, **fields: waited.append((op, fields))
    assert PeerCopies._streams(stream(third, 7), src, dst, "cudaMemcpyPeerAsync") == (0, 0)
    assert waited == [("stream_sync", {"stream": 7})]  # a third GPU's stream: waited for here


# ---------------------------------------------------------------- uploads from the network


def test_a_large_upload_lands_in_page_locked_staging_the_copy_reads(pool, monkeypatch):
    """An htod payload still in the lane is read, a piece at a time, straight
    into pinned buffers of the backend's, which the copies read: each
    piece's bytes are copied once on the host (by the socket), not twice."""
    from rcuda.server.device_service import land_on_device
    gpu, device = open_gpu(pool)
    size = (10 << 20) + 12345
    data = np.random.default_rng(5).integers(0, 256, size, dtype=np.uint8).tobytes()
    dst = device.malloc(size)
    reads, copies = [], []

    class Frame:  # an UnreadFrame: the lane's bytes, read where the caller says
        left = size

        def __len__(self):
            return size

        def read_into(self, target):
            view = np.frombuffer(target, np.uint8)
            start = size - self.left
            view[:] = np.frombuffer(data, np.uint8, view.size, start)
            reads.append(view.ctypes.data)
            self.left -= view.size

    real_copy = gpu.memcpyAsync

    def copy(dst_, src, count, kind, stream):
        copies.append(src)
        return real_copy(dst_, src, count, kind, stream)

    monkeypatch.setattr(gpu, "memcpyAsync", copy)
    land_on_device(Frame(), device, dst, 0, piece=4 << 20)
    finish(device.synchronize())
    assert gpu.read(dst, size) == data
    assert len(reads) == 3 and copies == reads and all(pool.holds(address, 1) for address in reads)
