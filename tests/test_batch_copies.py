"""Batches of copies (tests/cuda/batch_copies.cu): cudaMemcpyBatchAsync and
the driver's cuMemcpyBatchAsync, every copy's bytes read back, in every
direction, with the arguments CUDA refuses; run unmodified through rcuda on
a two-GPU sim server, on the lane and on a --auth server's ZeroMQ link, and
built with --default-stream per-thread (the _ptsz exports).  The backends'
part (memcpy_dtod_batch) is in tests/test_backends.py."""
from __future__ import annotations

import pytest

from conftest import requires_nvcc
from program_paths import check_passed, check_section, run_on_sim
from rcuda.binaries import dropin_dir
from rcuda.client.state import Runtime
from rcuda.config import ClientConfig, parse_server
from rcuda.errors import CudaError, cudaError
from rcuda.protocol import MAX_BATCH_COPIES

SECTIONS = ["copies", "large", "managed", "two_gpus", "bad_arguments", "default_streams", "driver", "three_d"]
LINK_DRIVER = (f"-L{dropin_dir()}", "-l:libcuda.so.1")


def _run(compile_cuda, *sections, flags=(), auth_root=None, env=None):
    return run_on_sim(compile_cuda, "batch_copies.cu", "sim_kernels.py", *sections, flags=(*LINK_DRIVER, *flags),
                      auth_root=auth_root, env=env)


@pytest.fixture(scope="module")
def result(compile_cuda):
    return _run(compile_cuda)


@requires_nvcc
@pytest.mark.parametrize("section", SECTIONS)
def test_section(result, section):
    check_section(result, section)


@requires_nvcc
def test_whole_program_passes(result):
    check_passed(result, "batch_copies.cu")
    assert "ok default_streams legacy" in result.stdout


@requires_nvcc
@pytest.mark.parametrize("link", ["lane", "socket"])
def test_on_a_auth_servers_links(compile_cuda, tmp_path, link):
    """A --auth server: on its sealed lanes (records of every size, both
    ways), and on its ZeroMQ link, where every message takes Python."""
    sections = ("copies", "large", "bad_arguments", "driver", "three_d")
    result = _run(compile_cuda, *sections, auth_root=tmp_path, env={"RCUDA_LINK": link})
    check_section(result, *sections)


@requires_nvcc
def test_per_thread_default_stream(compile_cuda):
    """Built with --default-stream per-thread: the _ptsz exports, where
    stream 0 is the thread's own stream and takes a batch."""
    result = _run(compile_cuda, "copies", "bad_arguments", "default_streams", flags=("--default-stream",
                                                                                      "per-thread"))
    check_section(result, "copies", "bad_arguments", "default_streams")
    assert "ok default_streams per-thread" in result.stdout


# ---------------------------------------------------------------- the copy_batch op by hand


@pytest.fixture
def device(sim_server):
    """GPU0 of a Python client (no interposer)."""
    rt = Runtime(ClientConfig(servers=[parse_server(sim_server.address)], timeout=10.0))
    yield rt.device(0)
    rt.shutdown()


def _read(device, ptr: int, size: int) -> bytes:
    _, frames = device.request("dtoh", src=ptr, size=size, stream=0)
    return b"".join(bytes(f.buffer) for f in frames)


def test_copy_batch_by_hand(device):
    """Copies within the GPU and uploads, whose bytes the payload carries
    back to back, land where they say; zero-size entries do nothing; the
    synchronous form is answered."""
    a, b = device.malloc(4096), device.malloc(4096)
    device.request("htod", [bytes(range(256)) * 16], dst=a, size=4096, stream=0)
    device.post("copy_batch", [b"abcdefgh"], copies=[b, a + 16, 16, b + 100, a, 0], uploads=[b + 32, 3, b + 64, 5],
                stream=0)
    back = _read(device, b, 128)
    assert back[:16] == bytes(range(16, 32)) and back[32:35] == b"abc" and back[64:69] == b"defgh"
    assert back[16:32] == bytes(16) and back[100:128] == bytes(28)
    device.request("copy_batch", copies=[b + 200, a, 8], uploads=[], stream=0)
    assert _read(device, b + 200, 8) == bytes(range(8))


@pytest.mark.parametrize("fields, frames, status", [
    ({"copies": [1, 2], "uploads": []}, [], cudaError.cudaErrorInvalidValue),              # not triples
    ({"copies": [], "uploads": [-1, 4]}, [b"1234"], cudaError.cudaErrorInvalidValue),      # negative
    ({"copies": [], "uploads": ["x", 4]}, [b"1234"], cudaError.cudaErrorInvalidValue),     # not integers
    ({"copies": [], "uploads": [None, 3]}, [b"123"], cudaError.cudaErrorInvalidValue),
    ({"copies": [], "uploads": [0, 4]}, [b"123"], cudaError.cudaErrorInvalidValue),        # payload too short
    ({"copies": [0, 0, 1] * (MAX_BATCH_COPIES + 1), "uploads": []}, [], cudaError.cudaErrorInvalidValue),
    ({"copies": [0, 0, 4], "uploads": []}, [], cudaError.cudaErrorInvalidValue),           # not the session's
    ({"copies": [], "uploads": [0, 4]}, [b"1234"], cudaError.cudaErrorInvalidValue),
    ({"copies": [], "uploads": [], "stream": 99}, [], cudaError.cudaErrorInvalidResourceHandle),
])
def test_a_bad_copy_batch_fails_and_copies_nothing(device, fields, frames, status):
    ptr = device.malloc(64)
    device.request("memset", ptr=ptr, value=0, size=64, stream=0)
    good = [ptr, ptr + 8, 8] if "stream" not in fields else []
    fields = {"stream": 0, **fields, "copies": good + fields["copies"]}
    with pytest.raises(CudaError) as error:
        device.request("copy_batch", frames, **fields)
    assert error.value.status == status
    assert _read(device, ptr, 64) == bytes(64)  # not even the good copy
